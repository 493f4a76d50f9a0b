"""An export that checks its own quality: every artifact translates a held-out sample, compared
with the checkpoint's own translations.

A servable artifact can still be wrong (an export whose outputs were wrong and repeated went
to users of another toolkit: OpenNMT-tf#1005). `check_quality(out, model_dir)` translates up to
`sample` held-out pairs of the model dir's data (its test split, else its validation split) with
the checkpoint (`Translator`, the export's own decoding settings from `translator.json`) and with
every artifact it finds in `out`, the checkpoint being the one exported (translator.json's
"checkpoint": `export --checkpoint averaged`, `best`, `ema` or a path):

| artifact | runs on | precision |
| --- | --- | --- |
| `saved_model/<name>/<N>/` serving_default | TensorFlow | the export's dtype |
| `saved_model/<name>_ids/<N>/` + the tokenizer | TensorFlow | the export's dtype |
| `saved_model/<name>_int8/<N>/` serving_default | TensorFlow | int8 weights |
| `translator.tflite`, `translator_int8.tflite` | LiteRT, else `tf.lite.Interpreter` | float32, int8 weights |
| a CTranslate2 model directory (`model.bin`) | CTranslate2 (the `ctranslate2` extra) | its weights' |

(an export with a glossary, `export --glossary`: its text SavedModels against the checkpoint's
translations under the same glossary, the others against the plain ones; an export with a
vocabulary shortlist, translator.json's `saved_model_shortlist`: the SavedModels, which search
over it, against the checkpoint's translations over the same shortlist, the TFLite models and
CTranslate2, which do not, against the full search's; a CTranslate2 model with its `vmap.txt`
searches over the shortlist, `use_vmap`), and reports, per
artifact, the share of outputs identical to the checkpoint's and the sacreBLEU difference. An
artifact fails past the tolerance: one in float32 must give at least `min_identical` (default
90%) of the checkpoint's outputs and lose at most `max_bleu_drop` (default 1.0) BLEU; a
reduced-precision one (bf16, the int8 SavedModel and TFLite model) or another engine
(CTranslate2, whose length penalty is |y|^alpha, not GNMT's) need only the BLEU bound. An
artifact whose runtime is not installed (CTranslate2's) is reported as not checked, with the
package to install;
the TFLite models run on TensorFlow's own interpreter when LiteRT (the `export` extra) is not there.

Every text SavedModel's `translate_markup` signature translates the sample with markup
(`markup_sample`: a word of each source in `<b>...</b>`, a `{0}` placeholder and a "⚖" after it,
a character few vocabularies write, so an export made before unknown characters were spans fails) and is
compared with the Python path, `Translator.translate(..., markup=True)`: each output must hold
every span of its source as often as the source does, and one in float32 must give at least
`min_identical` of the Python path's outputs.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import warnings
from collections.abc import Sequence

import numpy as np

from keras_transformer.config import DecodingConfig
from keras_transformer.evaluation.evaluation import corpus_scores
from keras_transformer.exporters.tensorflow import INT8_SUFFIX
from keras_transformer.translation.translator import Translator, padded

MIN_IDENTICAL = 0.9  # float32 artifacts: share of outputs identical to the checkpoint's
MAX_BLEU_DROP = 1.0  # every artifact: BLEU at most this far below the checkpoint's
SAMPLE = 100  # held-out pairs translated by each artifact


@dataclasses.dataclass(frozen=True)
class ArtifactQuality:
    """How one artifact's translations of the sample compare with the checkpoint's."""

    artifact: str  # its path
    identical: float | None  # share of outputs identical to the checkpoint's; None: not checked
    bleu: float | None
    bleu_drop: float | None  # the checkpoint's BLEU minus this one's
    exact: bool  # float32 on our search: held to `min_identical` too
    note: str = ""  # why it was not checked

    def problem(self, min_identical: float, max_bleu_drop: float) -> str | None:
        """One line if the artifact is past the tolerance, else None."""
        if self.identical is None:
            return None
        if self.exact and self.identical < min_identical:
            return (
                f"{self.artifact}: {self.identical:.0%} of its translations equal the checkpoint's "
                f"(at least {min_identical:.0%} expected); BLEU {self.bleu} vs {self.bleu + self.bleu_drop:.2f}"
            )
        if self.bleu_drop > max_bleu_drop:
            drop = f"{self.bleu_drop:.2f} below the checkpoint's (at most {max_bleu_drop})"
            return f"{self.artifact}: BLEU {self.bleu}, {drop}"
        return None

    def line(self) -> str:
        if self.identical is None:
            return f"{self.artifact}: not checked ({self.note})"
        return f"{self.artifact}: {self.identical:.0%} identical, BLEU {self.bleu} ({-self.bleu_drop:+.2f})"


def _latest(base: str) -> str | None:
    """The highest numbered version under a TF Serving base path, or None."""
    versions = [path for path in glob.glob(os.path.join(base, "*")) if os.path.basename(path).isdigit()]
    return max(versions, key=lambda path: int(os.path.basename(path)), default=None)


def _tflite_interpreter(path: str):
    """LiteRT's interpreter of the TFLite model `path` (the `export` extra), or without LiteRT
    TensorFlow's own `tf.lite.Interpreter`, which runs the same builtin-ops models (deprecated in
    favour of LiteRT, its warning silenced): every TFLite model is checked, installed extra or not."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "tf.lite.Interpreter is deprecated ... use ai_edge_litert"
            return tf.lite.Interpreter(model_path=path)
    return Interpreter(model_path=path)


def _runners(out: str, translator: Translator, metadata: dict) -> dict:
    """{artifact path: (translate(texts) -> texts, exact, kind)} for every artifact found in `out`
    (kind: "text" for a text SavedModel, which holds the export's glossary and shortlist,
    "shortlisted" for an ids-only one and for CTranslate2 with a vocabulary map, which search over
    the export's shortlist if it has one, "plain" for the TFLite models and CTranslate2 without
    one, which search the whole vocabulary),
    or {path: note} for one whose runtime is missing."""
    import tensorflow as tf

    tokenizer = translator.tokenizer

    def best(search):  # search(source_ids [B, S]) -> {"ids": [B, beam, L], ...}
        def translate(texts: list[str]) -> list[str]:
            ids = search(padded(translator.source_ids(texts)))["ids"][:, 0]  # [B, L]
            return [text.decode("utf-8") for text in tokenizer.detokenize(tf.constant(ids, tf.int32)).numpy()]

        return translate

    def text_signature(signature):
        def translate(texts: list[str]) -> list[str]:
            return [text.decode("utf-8") for text in signature(text=tf.constant(texts))["translation"].numpy()]

        return translate

    runners = {}
    exact = metadata.get("saved_model_dtype", "float32") == "float32"
    for base in sorted(glob.glob(os.path.join(out, "saved_model", "*"))):
        path = _latest(base)
        if path is None:
            continue
        signature = tf.saved_model.load(path).signatures["serving_default"]
        precise = exact and not os.path.basename(base).endswith(INT8_SUFFIX)  # int8 weights: the BLEU bound
        if "text" in signature.structured_input_signature[1]:
            runners[path] = (text_signature(signature), precise, "text")
        else:
            runners[path] = (best(lambda ids, s=signature: s(source_ids=tf.constant(ids))), precise, "shortlisted")
    for key, exact in (("ids", True), ("ids_int8", False)):
        path = os.path.join(out, metadata.get("models", {}).get(key, ""))
        if not os.path.isfile(path):
            continue
        runner = _tflite_interpreter(path).get_signature_runner()
        runners[path] = (best(lambda ids, r=runner: r(source_ids=ids)), exact, "plain")
    if os.path.isfile(os.path.join(out, "model.bin")):
        try:
            import ctranslate2
        except ImportError:
            runners[out] = "CTranslate2 is not installed: pip install 'keras-aiayn[ctranslate2]'"
        else:
            vmap = os.path.isfile(os.path.join(out, "vmap.txt"))  # exported from a dir with a shortlist
            runner = _ctranslate2_runner(ctranslate2.Translator(out), translator, vmap)
            runners[out] = (runner, False, "shortlisted" if vmap else "plain")
    return runners


def _ctranslate2_runner(engine, translator: Translator, use_vmap: bool = False):
    """translate(texts) by a CTranslate2 model of our weights: our source ids (CTranslate2 adds the
    EOS), our beam size and alpha, our detokenizer; over its vocabulary map with `use_vmap`."""
    import tensorflow as tf

    from keras_transformer.exporters.ctranslate2 import vocabulary

    tokens = vocabulary(translator.tokenizer, translator.model.config)
    ids = {token: i for i, token in enumerate(tokens)}
    decoding = translator.decoding

    def translate(texts):
        rows = translator.source_ids(texts)
        results = engine.translate_batch(
            [[tokens[i] for i in row[:-1]] for row in rows],
            beam_size=decoding.search.beam_size,
            length_penalty=decoding.search.alpha,
            max_decoding_length=translator.model.config.max_length,
            use_vmap=use_vmap,
        )
        hypotheses = [[ids[token] for token in result.hypotheses[0]] or [0] for result in results]
        return [t.decode("utf-8") for t in translator.tokenizer.detokenize(tf.constant(padded(hypotheses))).numpy()]

    return translate


def _glossary_constraints(out: str, metadata: dict, sources: list[str]):
    """Each source's phrases under the export's glossary (translator.json's "glossary", which
    every text signature of its text SavedModels holds), or None for an export without one."""
    if "glossary" not in metadata:
        return None
    from keras_transformer.translation.glossary import Glossary

    entry = metadata["glossary"]
    glossary = Glossary.from_tsv(os.path.join(out, entry["path"]), entry["case_sensitive"])
    return glossary.with_terms(sources, None) or [[] for _ in sources]


def markup_sample(sources: Sequence[str]) -> list[str]:
    """Each source with its middle word in `<b>...</b>`, then a `{0}` placeholder and "⚖" (an unknown
    character of most vocabularies: `markup.span_rule`) at its end."""
    marked = []
    for source in sources:
        words = source.split() or [""]
        middle = len(words) // 2
        marked.append(" ".join([*words[:middle], f"<b>{words[middle]}</b>", *words[middle + 1 :], "{0}", "⚖"]))
    return marked


def _markup_reports(out, translator, sources, references, exact_dtype, metadata):
    """(an `ArtifactQuality` per text SavedModel's `translate_markup` on `markup_sample(sources)`,
    against `Translator.translate(..., markup=True)`, BLEU on the outputs without their spans; the
    problems of outputs whose spans differ from their source's)."""
    import tensorflow as tf

    from keras_transformer.translation.markup import span_lists, stripped_texts

    marked = markup_sample(sources)
    expected = translator.translate(marked, markup=True, constraints=_glossary_constraints(out, metadata, marked))
    rule = translator.span_rule  # the spans the SavedModel's signature protects too
    expected_bleu = corpus_scores(stripped_texts(expected, rule), references)["bleu"]
    reports, problems = [], []
    for base in sorted(glob.glob(os.path.join(out, "saved_model", "*"))):
        path = _latest(base)
        signatures = tf.saved_model.load(path).signatures if path else {}
        if "translate_markup" not in signatures:
            continue
        output = signatures["translate_markup"](text=tf.constant(marked))["translation"].numpy()
        translations = [text.decode("utf-8") for text in output]
        identical = float(np.mean([a == b for a, b in zip(translations, expected)]))
        bleu = corpus_scores(stripped_texts(translations, rule), references)["bleu"]
        exact = exact_dtype and not os.path.basename(base).endswith(INT8_SUFFIX)
        artifact = f"{path} translate_markup"
        reports.append(ArtifactQuality(artifact, identical, bleu, round(expected_bleu - bleu, 2), exact))
        found = zip(marked, span_lists(marked, rule), span_lists(translations, rule))
        wrong = [text for text, want, got in found if want != got]
        if wrong:
            problems.append(f"{artifact}: {len(wrong)} outputs lose, repeat or reorder spans: {wrong[0]!r}")
    return reports, problems


def _exported_checkpoint(metadata: dict, model_dirs: Sequence[str]) -> str:
    """The checkpoint whose translations the artifacts must give: the one exported, as translator.json
    records it: its path for the model dir exported, its name ("averaged", ...) for other model dirs
    (an ensemble's: one name for all); "latest" for an export that does not say (an older one)."""
    exported = metadata.get("checkpoint", {})
    same_dirs = [os.path.abspath(path) for path in model_dirs] == metadata.get("model_dirs")
    if same_dirs and len(exported.get("paths", ())) == 1:
        return exported["paths"][0]
    return exported.get("name", "latest")


def check_quality(
    out: str,
    model_dirs: Sequence[str],
    sample: int = SAMPLE,
    min_identical: float = MIN_IDENTICAL,
    max_bleu_drop: float = MAX_BLEU_DROP,
) -> tuple[list[ArtifactQuality], list[str]]:
    """(a report per artifact, the one-line problems of those past the tolerance), against the
    checkpoint exported (`_exported_checkpoint`) of `model_dirs` (several: their ensemble), on the
    first one's held-out pairs."""
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.tokenizer import tag
    from keras_transformer.model_dir.held_out import held_out

    metadata_path = os.path.join(out, "translator.json")
    metadata = {}
    if os.path.isfile(metadata_path):
        with open(metadata_path, encoding="utf-8") as f:
            metadata = json.load(f)
    decoding = DecodingConfig.from_dict(metadata)
    try:  # the first model's
        pairs = held_out(model_dirs[0], "test", sample)
    except DataError:  # trained with --valid-data, without --test-data
        pairs = held_out(model_dirs[0], "validation", sample)
    references = pairs.references
    sources = [tag(text, pairs.target_lang) for text in pairs.sources]  # a multilingual model's: tagged
    shortlisted = bool(metadata.get("saved_model_shortlist")) or os.path.isfile(os.path.join(out, "vmap.txt"))
    decoding = decoding.replace(shortlist=shortlisted)
    checkpoint = _exported_checkpoint(metadata, model_dirs)
    translator = Translator.from_model_dir(list(model_dirs), checkpoint, decoding)
    expected = {"shortlisted": translator.translate(sources)}
    terms = _glossary_constraints(out, metadata, sources)
    expected["text"] = expected["shortlisted"] if terms is None else translator.translate(sources, constraints=terms)
    expected["plain"] = expected["shortlisted"]
    if shortlisted:  # the TFLite models and CTranslate2 search the whole vocabulary
        full = Translator.from_model_dir(list(model_dirs), checkpoint, decoding.replace(shortlist=False))
        expected["plain"] = full.translate(sources)
    reports, problems = [], []
    for path, runner in _runners(out, translator, metadata).items():
        if isinstance(runner, str):
            reports.append(ArtifactQuality(path, None, None, None, False, runner))
            continue
        translate, exact, kind = runner
        translations = translate(sources)
        identical = float(np.mean([a == b for a, b in zip(translations, expected[kind])]))
        reference_bleu = corpus_scores(expected[kind], references)["bleu"]
        bleu = corpus_scores(translations, references)["bleu"]
        report = ArtifactQuality(path, identical, bleu, round(reference_bleu - bleu, 2), exact)
        reports.append(report)
        problem = report.problem(min_identical, max_bleu_drop)
        if problem:
            problems.append(problem)
    exact = metadata.get("saved_model_dtype", "float32") == "float32"
    markup_reports, markup_problems = _markup_reports(out, translator, sources, references, exact, metadata)
    problems += [problem for report in markup_reports if (problem := report.problem(min_identical, max_bleu_drop))]
    return reports + markup_reports, problems + markup_problems
