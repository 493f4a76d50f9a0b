"""Text in, text out: tokenize, decode in length-sorted batches, detokenize.

import keras_transformer as kt

translator = kt.Translator.from_model_dir("runs/small")
translator.translate("Jesus wept.")               # -> str
translator.translate(["Jesus wept.", "Amen."])     # -> list[str]
translator.translate("Jesus wept. Amen.", split=True)  # a document: sentence by sentence (sentences.py)
translator.translate_nbest("Jesus wept.", n=4)     # -> [(str, score)], best first
translator.translate("Jesus wept.", prefixes="Jesus")  # continues the given start of a translation
translator.translate("Jesus wept.", constraints=["Jesus"])  # every output holds the phrases (search/constraints.py)
kt.Translator.from_model_dir("runs/small", glossary=kt.Glossary.from_tsv("terms.tsv"))  # terminology (glossary.py)
translator.translate("Jesus wept.", target_lang="fr")  # a multilingual model: into French (or one per text)
translator.score(["Jesus wept."], ["Jesus weinte."])   # -> [Score(score, log_prob, tokens, token_log_probs)]
translator.translate_with_alignments("Jesus wept.")  # -> (str, [(source word, target word)])
translator.translate_iterable(open("big.txt"), max_batch_tokens=4096)  # any number of lines, in order, lazily
translator.translate("Click <b>here</b>, {name}.", markup=True)  # tags and placeholders kept (markup_restore.py)
kt.Translator.from_model_dir(["runs/a", "runs/b"])  # an ensemble (search/ensemble.py)
kt.Translator.from_model_dir("runs/small", shortlist=False)  # the whole vocabulary, not the dir's shortlist
kt.Translator.from_model_dir("runs/small", modifiers=[BanToken(7)])  # a control of your own (kt.Modifier)
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, overload

import numpy as np
import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.data.tokenizer import lang_token
from keras_transformer.model_dir.shortlist import model_dir_shortlist
from keras_transformer.search import constraints as lexical
from keras_transformer.search.ensemble import Ensemble
from keras_transformer.search.inputs import user_modifiers
from keras_transformer.search.scoring import score as score_pairs
from keras_transformer.search.shortlist import check_shortlist
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.translation import alignment, confidence, streaming
from keras_transformer.translation.glossary import Glossary
from keras_transformer.translation.pipeline import Pipeline, Request


class Score(NamedTuple):
    """A pair's score (`search/scoring.py`): `score` = `log_prob` / lp(`tokens`); `token_log_probs` per
    target token, EOS last."""

    score: float
    log_prob: float
    tokens: int
    token_log_probs: list[float]


def cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def padded(rows, width: int | None = None) -> np.ndarray:
    """[B, width (default: the longest row)] int32 from rows of ids, padded with PAD_ID."""
    batch = np.full((len(rows), max([width or 0, *map(len, rows)])), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


class Translator:
    """Translates sentences with a trained model and its tokenizer, by beam search with the
    settings of a `DecodingConfig` (default the paper's, §6.1: beam size 4, length penalty alpha
    0.6; `DecodingConfig.greedy()` is greedy decoding), given whole (`decoding`) or as
    `overrides` of its fields (`Translator(model, tokenizer, beam_size=1, alpha=0.0)`).

    A source longer than the model's `max_length` (EOS included) is truncated, with a warning on
    stderr; with `translate(..., split=True)` a document is translated sentence by sentence, a
    sentence too long cut further, so nothing is truncated. An empty (or all-space) source
    translates to the empty string (score 0). A score is the sum of the hypothesis's token
    log-probabilities divided by the length penalty ((5 + |y|) / 6)^alpha (Wu et al., 2016). With
    `dtype` "bfloat16" the model decodes in a bf16 copy (`Transformer.with_dtype`), with `int8` in a
    copy with int8 weights (`Transformer.with_int8`). With sampling on (`sampling_topk` 0 or K > 1)
    translations are drawn (`search/sampling.py`) instead of searched: `translate` gives each
    text's best-scoring of `num_samples` samples, `translate_nbest` all of them.

    `prefixes` (of `translate`, `translate_nbest`): a target prefix for every text (a str), or one
    per text (a list; "" for none): each translation continues its prefix (`search/prefix.py`).
    `constraints` (of the same): phrases that every translation holds (`search/constraints.py`): one
    list of phrases for every text, or one list per text ([] for none).
    `model` may be an `Ensemble` of models that share `tokenizer`.

    With the `shortlist` setting, every search (not `score`) runs over the union of its batch's
    vocabulary shortlists (`search/shortlist.py`), those of `lexical_shortlist` (a
    `data.shortlist.Shortlist`; `from_model_dir` reads the model dir's `shortlist.npz`).

    `glossary` (a `Glossary`): where a text holds one of its terms, every translation (`translate`,
    `translate_nbest`, markup, documents, alignments) is constrained to the term's target
    (`glossary.py`), beside any `constraints` given, as in every text signature of an export; a
    ValueError at once for a target term the constraint search cannot hold (characters the
    vocabulary lacks, more than max_length - 1 tokens) and for sampling.

    `modifiers`: the user's own controls (`kt.Modifier` instances: `search.Modifier`), in every
    search after the settings' controls; `export_tensorflow(..., modifiers=)` traces the same ones
    into a SavedModel.

    Text goes through `pipeline.Pipeline` (`self.pipeline`), the stages that every SavedModel
    signature runs too; this class adds the batching (length-sorted batches, searched side by
    side on threads) and the Python types. `decode` is the search of every translation.

    `target_lang` (of `translate`, `translate_nbest`, `score`): a multilingual model's target language for
    every text (a str), or one per text (a list); it puts that language's piece before each text
    (`SubwordTokenizer.tagged`: "<2fr> Jesus wept."), which a text may also carry itself. A
    multilingual model needs one of the two; an unknown language is a `ValueError`.
    """

    def __init__(
        self,
        model,
        tokenizer,
        decoding: DecodingConfig | None = None,
        glossary: Glossary | None = None,
        *,
        lexical_shortlist=None,
        modifiers: Sequence = (),
        **overrides,
    ):
        self.decoding = (decoding or DecodingConfig()).replace(**overrides)
        check_shortlist(self.decoding, lexical_shortlist)
        if glossary is not None:
            if self.decoding.sampling:
                raise ValueError("a glossary constrains beam search, not sampling: set sampling_topk 1")
            glossary.check(tokenizer, model.config.max_length)
        self.glossary = glossary
        dtype = self.decoding.runtime.dtype
        model = model if dtype is None else model.with_dtype(dtype)
        self.model = model.with_int8() if self.decoding.runtime.int8 else model
        self.tokenizer = tokenizer
        self.lexical_shortlist = lexical_shortlist if self.decoding.search.shortlist else None
        self.pipeline = Pipeline(
            self.model, tokenizer, self.decoding, glossary, self.lexical_shortlist, user_modifiers(modifiers)
        )
        self.suppress_ids = self.pipeline.suppress_ids
        self.length_ratio = None  # a `confidence.LengthRatio`: return_scores' length_ratio flag

    @property
    def modifiers(self) -> tuple:
        """The user's modifiers (`kt.Modifier`), in every search after the settings' controls."""
        return self.pipeline.modifiers

    @property
    def span_rule(self) -> str:
        """What `translate(..., markup=True)` protects: `markup.span_rule` of the tokenizer (markup,
        placeholders, and the characters the vocabulary cannot write), as the SavedModel's
        `translate_markup` does."""
        return self.pipeline.span_rule

    @classmethod
    def from_model_dir(
        cls,
        path: str | Sequence[str],
        checkpoint: str = "latest",
        decoding: DecodingConfig | None = None,
        glossary: Glossary | None = None,
        modifiers: Sequence = (),
        **overrides,
    ) -> Translator:
        """The translator of a model directory (`keras-transformer train --model-dir PATH`), with the
        weights of `checkpoint`: "latest" (the default), "averaged", "best" or a checkpoint path,
        decoding with `decoding` and `overrides` of its fields (`DecodingConfig`), constrained by
        `glossary`, with the user's `modifiers` (`kt.Modifier`s). A list of several directories
        gives their `Ensemble` (which must share one tokenizer). The (first) directory's vocabulary
        shortlist is read as the `shortlist` setting says (by default wherever it has one:
        `model_dir.shortlist.model_dir_shortlist`)."""
        from keras_transformer.model_dir import load_model

        paths = [path] if isinstance(path, str) else list(path)
        if len(paths) > 1:
            model, tokenizer = Ensemble.from_model_dirs(paths, checkpoint)
        else:
            model, tokenizer, _ = load_model(paths[0], checkpoint)
        settings = (decoding or DecodingConfig()).replace(**overrides)
        settings, shortlist = model_dir_shortlist(paths[0], settings, model.config.vocab_size)
        return cls(model, tokenizer, settings, glossary, lexical_shortlist=shortlist, modifiers=modifiers)

    def source_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, truncated to max_length - 1, then EOS (`Pipeline.source_ids`),
        with a warning on stderr for a text truncated."""
        keep = self.model.config.max_length - 1
        ids, counts = self.pipeline.source_ids(tf.constant(list(texts), tf.string))  # [B, S], [B]
        rows = []
        for text, row, count in zip(texts, ids.numpy(), counts.numpy()):
            if count > keep:
                print(f"warning: source of {count} tokens truncated to {keep}: {text[:40]!r}...", file=sys.stderr)
            rows.append(row[: min(count, keep) + 1])  # [tokens + EOS]
        return rows

    def target_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as a decoder continues them: no start, no EOS, truncated to
        max_length - 1 (with a warning on stderr)."""
        keep = self.model.config.max_length - 1
        rows = []
        for text, row in zip(texts, self.tokenizer.tokenize(list(texts)).to_list()):
            if len(row) > keep:
                print(f"warning: target of {len(row)} tokens truncated to {keep}: {text[:40]!r}...", file=sys.stderr)
            rows.append(np.array(row[:keep], np.int32))
        return rows

    def decode(
        self,
        source_ids,
        n: int | None = None,
        target_prefix=None,
        seed: int | None = None,
        constraints=None,
        alternatives: bool = False,
    ):
        """[B, S] ids -> (hypothesis ids [B, n, L], scores [B, n]), the `n` best (default: the beam
        size), best first; every hypothesis starting with its row of `target_prefix` [B, P] if
        given, and holding its row of `constraints` [B, C, T] if given (sampling too: `search/sampling.py`).
        With sampling on: `num_samples` samples drawn with `seed` (default: the decoding's). With
        `alternatives`: the n alternatives after each prefix (`search/alternatives.py`), in their order.
        The search of every translation: a subclass may replace it."""
        return self.pipeline.search(source_ids, n, target_prefix, constraints, seed, alternatives)

    def score(self, sources: Sequence[str], targets: Sequence[str], target_lang=None) -> list[Score]:
        """The score of each (source, target) pair under the model (`search/scoring.py`): the sum of the
        target's token log-probabilities, EOS included, and that over the length penalty of
        `alpha`; sources as `translate` reads them (`target_lang` too), targets cut to
        max_length - 1 tokens."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        sources, targets = self._with_language(list(sources), target_lang), list(targets)
        source_rows, target_rows = self.source_ids(sources) if sources else [], self.target_ids(targets)
        order = sorted(range(len(sources)), key=lambda i: (len(source_rows[i]), len(target_rows[i])))
        scores: list[Score | None] = [None] * len(sources)
        batch_size = self.decoding.runtime.batch_size
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            result = score_pairs(
                self.model,
                padded([source_rows[i] for i in chunk]),
                padded([target_rows[i] for i in chunk]),
                self.decoding,
            )
            arrays = (result.score, result.log_prob, result.tokens, result.token_log_probs)
            values = zip(*(array.numpy() for array in arrays))
            for i, (normalised, log_prob, tokens, token_log_probs) in zip(chunk, values):
                scores[i] = Score(float(normalised), float(log_prob), int(tokens), token_log_probs[:tokens].tolist())
        return scores

    @overload
    def translate(self, texts: str) -> str: ...

    @overload
    def translate(self, texts: Sequence[str]) -> list[str]: ...

    def translate(
        self, texts, prefixes=None, constraints=None, target_lang=None, markup=False, split=False, return_scores=False
    ):
        """The best translation of a text (a str), or of each text of a list (a list of str). With
        `markup`, the tags, entities, placeholders, URLs and e-mail addresses of a text, and the
        characters the vocabulary cannot write (an emoji, a CJK name: `span_rule`), are kept
        exactly, placed by the word alignments (`markup_restore.py`; a text without them
        translates as usual). With `split`, each text is a document: its sentences
        (`sentences.py`; one too long for the model cut further at its best boundary) are
        translated (with `markup` too), all of them in one go, and their translations joined in
        order with the whitespace that was between them; a document takes no prefix and no
        constraints (a glossary applies to each sentence). `pipeline.Request.check` says which
        combinations are refused. With `return_scores`, each translation comes as a
        `confidence.Scored(translation, confidence)`: its sentence confidence, per-word scores and
        failure flags (`translation/confidence.py`; the `length_ratio` flag where `self.length_ratio`
        is set, e.g. to `LengthRatio.from_model_dir(path)`), the numbers of the SavedModel's
        `translate_with_scores`."""
        if isinstance(texts, str):
            constraints = None if constraints is None else [constraints]
            return self.translate([texts], prefixes, constraints, target_lang, markup, split, return_scores)[0]
        request = Request(1, prefixes, constraints, target_lang, markup, split)
        request.check(self.decoding)
        if return_scores:
            return self._scored(list(texts), request)
        if split:
            return self._translate_documents(list(texts), request)
        return [hypotheses[0][0] for hypotheses, _ in self._translations(list(texts), request, 1)]

    def _scored(self, texts: list[str], request: Request) -> list[confidence.Scored]:
        """`translate(..., return_scores=True)`: sentences translated with their alignments in one
        search (documents or markup: translated, then aligned by a new search), then scored."""
        inputs = (request.prefixes, request.constraints, request.target_lang)
        if request.split or request.markup:
            translations, aligned = self.translate(texts, *inputs, request.markup, request.split), None
        else:
            aligned = self.translate_with_alignments(texts, *inputs)
            translations = [translation for translation, _ in aligned]
        found = confidence.confidence(self, texts, translations, self.length_ratio, request.target_lang, aligned)
        return [confidence.Scored(translation, c) for translation, c in zip(translations, found)]

    def _translate_documents(self, texts: list[str], request: Request) -> list[str]:
        """Each text a document: `Pipeline.split`, its sentences translated as a list, `Pipeline.join`."""
        if not texts:
            return []
        _, _, langs = request.per_text(len(texts))
        if langs is not None:
            self.tokenizer.tagged(texts, langs)  # its checks: a multilingual model, languages it knows
            langs = tf.constant(langs, tf.string)
        found, separators, langs = self.pipeline.split(tf.constant(texts, tf.string), langs)  # [N], [D, (k)], [N]
        flat = [sentence.decode("utf-8") for sentence in found.numpy()]
        if langs is not None:
            langs = [lang.decode("utf-8") for lang in langs.numpy()]
            if not all(langs[i] or not flat[i].strip() for i in range(len(flat))):
                self._check_tagged(flat)  # a document without a language: the error of `_check_tagged`
        sentence_request = dataclasses.replace(request, split=False, target_lang=langs)
        translations = [rows[0][0] for rows, _ in self._translations(flat, sentence_request, 1)]
        documents = self.pipeline.join(tf.constant(translations, tf.string), separators)  # [D]
        return [text.decode("utf-8") for text in documents.numpy()]

    @overload
    def translate_nbest(self, texts: str, n: int | None = None) -> list[tuple[str, float]]: ...

    @overload
    def translate_nbest(self, texts: Sequence[str], n: int | None = None) -> list[list[tuple[str, float]]]: ...

    def translate_nbest(self, texts, n=None, prefixes=None, constraints=None, target_lang=None, markup=False):
        """The `n` best (translation, score) pairs of a text, best first (for a list: one such list
        per text); `n` defaults to the decoding's `nbest`, else the beam size (sampling: the
        `num_samples` samples)."""
        if isinstance(texts, str):
            constraints = None if constraints is None else [constraints]
            return self.translate_nbest([texts], n, prefixes, constraints, target_lang, markup)[0]
        request = Request(n, prefixes, constraints, target_lang, markup)
        n = request.check(self.decoding)
        return [hypotheses for hypotheses, _ in self._translations(list(texts), request, n)]

    @overload
    def translate_alternatives(self, texts: str, n: int, prefixes=None) -> list[tuple[str, float]]: ...

    @overload
    def translate_alternatives(self, texts: Sequence[str], n: int, prefixes=None) -> list[list[tuple[str, float]]]: ...

    def translate_alternatives(self, texts, n, prefixes=None, target_lang=None, constraints=None):
        """The `n` alternatives of a text at the position after its prefix (`prefixes` as
        `translate` takes them; none: at the first word), each continued to a whole translation:
        [(translation, score)] in the order of the alternative token's probability
        (`search/alternatives.py`, CTranslate2's `return_alternatives`); for a list: one such
        list per text; `constraints` are refused (`pipeline.Request`)."""
        if not 1 <= n <= self.model.config.vocab_size:
            raise ValueError(f"n must be between 1 and the vocabulary size {self.model.config.vocab_size}, got {n}")
        if isinstance(texts, str):
            return self.translate_alternatives([texts], n, prefixes, target_lang, constraints)[0]
        request = Request(n, prefixes, constraints, target_lang, alternatives=True)
        n = request.check(self.decoding)
        return [hypotheses for hypotheses, _ in self._translations(list(texts), request, n)]

    @overload
    def translate_with_alignments(self, texts: str) -> tuple[str, list[tuple[int, int]]]: ...

    @overload
    def translate_with_alignments(self, texts: Sequence[str]) -> list[tuple[str, list[tuple[int, int]]]]: ...

    def translate_with_alignments(self, texts, prefixes=None, constraints=None, target_lang=None):
        """The best translation of a text and its word alignment: (translation, [(i, j), ...]), one
        pair per word j of `translation.split()`, with i the word of `text.split()` it aligns to
        (`translation/alignment.py`: the cross-attention of decoder layer `decoding.alignment_layer`,
        averaged over heads); for a list: one such pair per text."""
        if isinstance(texts, str):
            constraints = None if constraints is None else [constraints]
            return self.translate_with_alignments([texts], prefixes, constraints, target_lang)[0]
        request = Request(1, prefixes, constraints, target_lang, alignments=True)
        request.check(self.decoding)
        return [
            (hypotheses[0][0], alignment.parse_pharaoh(pharaoh))
            for hypotheses, pharaoh in self._translations(list(texts), request, 1)
        ]

    def translate_iterable(
        self, lines: Iterable[str], max_batch_tokens: int = streaming.DEFAULT_MAX_BATCH_TOKENS, **options
    ):
        """The translation of each of `lines` (any iterable, read lazily), in order, as
        `translate(chunk, **options)` gives it, `max_batch_tokens` source tokens read at a time:
        memory holds one chunk whatever the input's length (CTranslate2's name;
        `translation/streaming.py`)."""
        return streaming.translate_iterable(self, lines, max_batch_tokens, **options)

    def score_iterable(
        self,
        sources: Iterable[str],
        targets: Iterable[str],
        max_batch_tokens: int = streaming.DEFAULT_MAX_BATCH_TOKENS,
        **options,
    ):
        """The `Score` of each (source, target) pair, in order, `max_batch_tokens` tokens read at a
        time (`score(**options)`); a ValueError where one iterable ends before the other."""
        return streaming.score_iterable(self, sources, targets, max_batch_tokens, **options)

    def _batches(self, texts: list[str]):
        """(indices into `texts`, the batch's start in the sorted order) per search: the non-empty
        texts sorted by their token count (similar lengths share a batch), `batch_size` at a time."""
        todo = [i for i, text in enumerate(texts) if text.strip()]
        rows = self.source_ids([texts[i] for i in todo]) if todo else []
        order = sorted(range(len(todo)), key=lambda k: len(rows[k]))
        batch_size = self.decoding.runtime.batch_size
        for start in range(0, len(order), batch_size):
            yield [todo[k] for k in order[start : start + batch_size]], start

    def concurrent_batches(self) -> int:
        """How many batches `translate` searches at once: `concurrent_batches`, or one per
        thread of TensorFlow's inter-op pool (by default one per CPU core)."""
        return (
            self.decoding.runtime.concurrent_batches
            or tf.config.threading.get_inter_op_parallelism_threads()
            or cores()
        )

    def _map_batches(self, work, texts: list[str], empty) -> list:
        """One result per text: `empty()` for an empty text, else its row of `work(indices, start)`
        (a list with a result per row), which runs once per batch of `_batches`,
        `concurrent_batches()` batches at once, each on a thread of its own, the longest first.

        A search's ops are too small to spread over cores (TensorFlow's intra-op pool): one search
        on two cores took as long as on one, and two at once on two cores, one thread per op, 0.55x
        as long (the held-out verses, bench/RESULTS.md, "One thread per op, batches side by side"); so a CPU's cores
        translate side by side, as CTranslate2's `inter_threads` do."""
        batches = list(self._batches(texts))
        workers = min(self.concurrent_batches(), len(batches))
        if workers > 1:  # the longest batches first, so that the threads end together
            with ThreadPoolExecutor(workers, thread_name_prefix="translate") as pool:
                rows = list(pool.map(lambda batch: work(*batch), batches[::-1]))[::-1]
        else:
            rows = [work(*batch) for batch in batches]
        results = [empty() for _ in texts]
        for (indices, _), batch_rows in zip(batches, rows):
            for i, row in zip(indices, batch_rows):
                results[i] = row
        return results

    def _check_tagged(self, texts: list[str]) -> None:
        """A ValueError where a multilingual model gets a text without its language's piece."""
        langs = self.tokenizer.target_langs
        if langs and not all(self.tokenizer.has_tag(text) or not text.strip() for text in texts):
            raise ValueError(
                f"this multilingual model translates into {', '.join(langs)}: pass a target language "
                f"(target_lang, --target-lang), or start each text with its token ({lang_token(langs[0])} ...)"
            )

    def _with_language(self, texts: list[str], target_lang) -> list[str]:
        """`texts` with `target_lang`'s piece in front (see the class docstring); checked."""
        if target_lang is not None:
            return self.tokenizer.tagged(texts, target_lang)
        self._check_tagged(texts)
        return texts

    def _translations(self, texts: list[str], request: Request, n: int) -> list[tuple[list[tuple[str, float]], str]]:
        """Each text's ([(translation, score)] x n, Pharaoh alignment of the best): the request's
        per-text inputs checked, then `Pipeline.translate` on every batch of `_map_batches`, with
        `decode` as its search."""
        prefixes, constraints, langs = request.per_text(len(texts))
        if langs is not None:
            self.tokenizer.tagged(texts, langs)  # its checks: a multilingual model, languages it knows
        else:
            self._check_tagged(texts)
        if constraints is not None:  # the phrases' checks (empty, unknown characters, too long)
            lexical.phrase_rows(self.tokenizer, constraints, len(texts), self.model.config.max_length)
            if not any(constraints):
                constraints = None
        sampling_seed = self.decoding.sampling.seed if self.decoding.sampling else None

        def work(indices, start):
            pick = lambda values: None if values is None else tf.constant([values[i] for i in indices], tf.string)
            phrases = None
            if constraints is not None:
                width = max(1, *(len(constraints[i]) for i in indices))
                phrases = tf.constant([constraints[i] + [""] * (width - len(constraints[i])) for i in indices])

            def search(source_ids, count, **inputs):  # only what is given: a subclass's `decode(source_ids, n)`
                if request.alternatives:  # serves the rest
                    inputs["alternatives"] = True
                if sampling_seed is not None:
                    inputs["seed"] = sampling_seed + start  # one stream per batch
                return self.decode(source_ids, count, **inputs)

            found = self.pipeline.translate(
                pick(texts),
                n,
                prefix=pick(prefixes),
                constraints=phrases,
                target_lang=pick(langs),
                markup=request.markup,
                alignments=request.alignments,
                search=search,
            )
            outputs, scores = found.translations.numpy(), found.scores.numpy()  # [B, n] each
            return [
                ([(output.decode("utf-8"), float(score)) for output, score in zip(row, row_scores)], pharaoh.decode())
                for row, row_scores, pharaoh in zip(outputs, scores, found.alignment.numpy())
            ]

        return self._map_batches(work, texts, empty=lambda: ([("", 0.0)] * n, ""))
