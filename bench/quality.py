"""Translation quality, one subcommand per question; each prints one JSON line.

`table`: the README's quality table. Train a preset on the embedded Bible EN-DE for a
wall-clock budget, then sacreBLEU BLEU and chrF on the held-out books (the whole test split,
detokenized, cased) with greedy decoding and with beam 4 (alpha 0.6):

    python bench/quality.py table --time-budget 30m [--preset small] [--model-dir runs/quality-30m]

The flags of `keras-transformer train` override the preset's `TransformerConfig` and
`TrainingConfig` fields (how the recipe was chosen: bench/JOURNAL.md, "Quality on a CPU
budget"), e.g. `--no-norm-first --learning-rate-scale 2`; the preset is the run's own
(`Preset.budget_fit`): from 30 minutes `small` takes dropout 0.1 where the budget buys 9,000 steps
or more (`dropout_from_steps`), and where TensorFlow runs bfloat16 on AMX or AVX512_BF16 it is
d_model 256 in bfloat16; `--d-model 128 --d-ff 512 --no-mixed-precision --dropout 0` is the narrow
recipe without dropout. Training goes through
`keras_transformer.training.trainer.train`, exactly as `keras-transformer train --preset small
--time-budget 30m` does. Epochs and target tokens/s are estimated: the real (non-pad) target
tokens per batch are averaged over `--sample-batches` batches of the same pipeline, times the
steps trained, over the training split's target tokens. Besides the last weights, beam 4 scores
the last `--average-last` (5) checkpoints averaged (§6.1) and, with `--ema-decay`, the moving
average of the weights: which the recipe should end with. The line also holds the validation loss
at each epoch end ([step, loss]) and its lowest: where a recipe starts to overfit, and what `train`
logged (`train_log`: the budget's step estimate, what the preset's budget changed, dropout turned off).

`search-grid`: the beam size and length penalty that `evaluate` and `translate` use by default
(issue 54 item 2), chosen on the validation split, never the test books: sacreBLEU BLEU and chrF
of a trained model's validation pairs (as `evaluate --split validation` reads them) translated at
each beam size K and length penalty alpha (Wu et al., 2016, §7; greedy only at alpha 0), with the
seconds of each after an untimed warm-up; the best BLEU's settings in "best":

    python bench/quality.py search-grid --model-dir runs/small30 [--beam-sizes 1 4 6 8] [--alphas 0 0.6 1 1.4]

`score-compare`: scoring given translations: ours (`Translator.score`, `keras-transformer score`)
against CTranslate2's `score_batch` on the same weights (our `export --format ctranslate2`), each
system in a process of its own (CTranslate2 at its default threading):

    python bench/quality.py score-compare --model-dir runs/demo [--limit N] [--rounds 3] [--batch-size 32]

The pairs: the held-out verses of the model's training data (its `test` split) with their
reference translations, text in: each system tokenizes (ours in TensorFlow, CTranslate2's user with
the SentencePiece library; both cut sources and targets to max_length - 1 tokens), then scores in
length-sorted batches of `--batch-size` pairs. Seconds are the median over rounds after an untimed
warm-up on two pairs; pairs/s over those seconds. `max_abs_log_prob_difference`: the largest
difference of a pair's summed log-probability between the systems (CTranslate2 renormalises its
softmax without pad and start: `exporters.ctranslate2.never_generated_bias`;
tests/test_ctranslate2.py checks each token to 1e-4).

`shortlist`: the vocabulary shortlist's cost in quality and its speed-up (issue 39 item 2): the
held-out verses (the `test` split) translated by `Translator` with and without `--shortlist`,
rounds alternating after an untimed warm-up; BLEU/chrF of each, their difference, the median
seconds and target tokens/s. The model dir's `shortlist.npz` is built first if missing
(`keras-transformer shortlist`; `--rebuild` builds it again with `--per-source`/`--frequent`):

    python bench/quality.py shortlist --model-dir runs/demo [--limit N] [--beam-size 4] [--rounds 3]

`alignment-names`: how well the cross-attention word alignments (`Translator.translate_with_alignments`)
pair names: on a trained model's held-out verses (the `test` split of its training data, as
`keras-transformer evaluate` reads it), every word of our German output that is a name (of
`NAMES`, the same string in English and German) also in its English source counts once, and is
aligned when its source word is that name; per decoder layer asked for:

    python bench/quality.py alignment-names --model-dir runs/a [--model-dir runs/b] [--alignment-layer -2 -1]

Only verses whose source holds a name are translated (the others hold no case). A name that
German spells otherwise (Paul/Paulus, Christ/Christus, Mordecai/Mordechai) counts only where
our output keeps the English spelling.

`files`: translate-file's formats (issue 51) on held-out data: a PO and an XLIFF 1.2 built from the
software messages of the `test` split that hold placeholders or tags (in the XLIFF as <ph> codes),
an SRT (a two-line cue per verse) and an HTML page (a <p> per verse, a word of each in <b>) from the
model's held-out verses: BLEU/chrF of the filled targets (markup stripped) against the references,
beside the same texts translated as plain lines; the share of units whose placeholders and inline
codes come out exactly (goal 1.0); seconds per 1,000 units:

    python bench/quality.py files --model-dir runs/demo [--limit N]

`constraints`: lexically constrained decoding (`search/constraints.py`, dynamic beam
allocation) on a trained model's held-out verses, as Post & Vilar (2018) evaluate it: each verse
gets 1-3 phrases (seeded) from its reference, words or two words in a row that the unconstrained
output lacks. The share of phrases found in the outputs (goal 1.0), sacreBLEU BLEU and chrF
without and with the phrases, and the seconds per verse with 0, 1, 2 and 3 phrases, on the verses
that have three (the slowdown per phrase):

    python bench/quality.py constraints --model-dir runs/small [--limit 200] [--beam-size 4] [--seed 0]

Timing runs after one warm-up call of each search (the tracing), in this process, each count of
phrases once; measure on a quiet machine (bench/README.md).

`paragraphs`: documents, not sentences (issue 36 item 1): the held-out verses joined `--per-line`
(5) to a line with a space, each line translated as a paragraph (`Translator.translate(...,
split=True)`: sentence by sentence, `translation/sentences.py`), as one sequence (`split=False`,
what `translate --no-split` does: cut at max_length), the verses one per line, and the sentences
the splitter found in the lines translated apart (one per line, as a list; their translations
joined as the paragraphs' are): what a paragraph costs against its own sentences, the issue's
"no more than the sentences translated apart" (`paragraphs_over_sentences_apart`). Verses dropped:
unsplit, those whose every token lies past the line's first max_length - 1; as paragraphs, at most
the verses of a line whose sentences lost a token past max_length - 1 (goal 0); sacreBLEU BLEU and
chrF of each way on the lines (the verse translations joined as their sources were, against the
references joined likewise); the median seconds of each over `--rounds`, the ways alternating
within a round, after a warm-up:

    python bench/quality.py paragraphs --model-dir runs/small [--limit N] [--per-line 5] [--beam-size 4] [--rounds 3]

`markup`: markup and placeholders (issue 36 item 2; `Translator.translate(..., markup=True)`). On the
embedded `software-en-de` test split's pairs whose source holds a span (tags, entities,
placeholders, URLs, e-mail addresses: `translation/markup.py`), the share of outputs whose spans are
the source's, in order (`span_lists`), and sacreBLEU BLEU/chrF, with and without protection; on
the model's held-out verses with one word each wrapped in `<b>...</b>` (seeded), the share of
outputs with the source's tags, balanced and in order, and BLEU/chrF of the outputs without their
tags against the translations of the untagged verses:

    python bench/quality.py markup --model-dir runs/small [--limit N] [--seed 0]

`casing`: what casing at training time buys (issue 36 item 4): the `make demo` recipe (`--preset
small --num-layers 2`, 6 minutes) trained twice from scratch on the same data, without and with
`--uppercase-share 0.05 --titlecase-share 0.05` (the `DataConfig` flags override these), then
sacreBLEU BLEU and chrF of each on the held-out verses as they are, in ALL CAPS and in Title Case
(source and reference cased alike, by the package's own `upper_case` and `title_case`), greedy
unless `--beam-size`; the six BLEU figures side by side in "bleu":

    python bench/quality.py casing --time-budget 6m [--model-dir runs/casing] [--limit N] [--source-noise 0.02]

`glossary`: a glossary (issue 36 item 3; `Translator(..., glossary=...)`) of 20 terms chosen from
the data by a stated rule, never by hand nor from the test references (`glossary_terms`): source
words of the held-out verses, not among the 100 words in most training sources and in at least 10
of them, each with the target word of its highest Dice coefficient over the training pairs, kept
where that word is not among the 100 in most training targets and is in at least 80% of the
training targets whose source holds the term; the 20 in most held-out verses. Of the held-out
verses that hold a term, the share whose output holds every one of its target terms (as text,
what the constraint search guarantees, and as whole words), and whose reference does (the rule's
precision); BLEU/chrF and seconds of all held-out verses without and with the glossary, after a
warm-up; the terms in the JSON line (and, with `--write-glossary FILE`, a TSV file for `translate
--glossary FILE`):

    python bench/quality.py glossary --model-dir runs/demo [--limit N] [--write-glossary terms.tsv]

`unknown`: unknown characters (issue 36 item 5): the first `--sentences` (30) held-out verses, each
with an emoji, a CJK name or a rare symbol (`UNSEEN`, kinds in turn, item and place seeded) between
two words; an item is used only if none of its characters is in the training text or in a piece of
the vocabulary. The share of outputs that hold their item exactly once, overall and per kind, by
the package's default path (`translate`'s: markup on, `Translator.translate(..., markup=True,
split=True)`, which protects the characters the vocabulary cannot write: `markup.span_rule`) and
without that protection (`--markup off`: `unprotected_kept_share`), and whether the tokenizer has
byte fallback; where an item is lost without protection: the share whose source ids spell it in
byte pieces, whose best hypothesis holds those pieces in a row, and how many hold them there but
lose them in the detokenized text; BLEU/chrF of the verses as they are and with their items by the
default path, and with their items unprotected:

    python bench/quality.py unknown --model-dir runs/demo [--sentences 30] [--seed 0]

`backtranslation`: does back-translation help at this size (issue 53; Sennrich et al., 2016)? The
embedded Bible's training pairs (EN-DE, book order) cut at the middle verse: half A is the
parallel data, half B's German side the monolingual text. A reverse model (DE -> EN) trains on A
for the budget; `keras-transformer backtranslate` (the Beam pipeline, DirectRunner) turns B's
German into synthetic English, tagged `<BT>` (a piece of its own: `--user-symbols`), by sampling
(`--sampling-topk 0`, Edunov et al., 2018) or beam search; then two forward models train for the
same budget each: on A alone, and on A plus the synthetic pairs (`--data A.tsv:W,bt.tsv:1-W`,
default half and half: the halves are of one size). sacreBLEU of each on the held-out books:

    python bench/quality.py backtranslation --time-budget 30m [--preset small] [--sampling-topk 0] [--limit N]

Every subcommand that reads a model's held-out verses reads them through the package's one reader
(`common.held_out_pairs`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

import keras
import numpy as np
import tensorflow as tf
from common import command_line, emit, held_out_pairs, load_average, median, record

import keras_transformer as kt
from keras_transformer import TrainingConfig, TransformerConfig
from keras_transformer.cli.flags import add_config_flags, add_train_flags, configs, overrides
from keras_transformer.config import DataConfig, DecodingConfig, SearchSettings
from keras_transformer.data import augmentation
from keras_transformer.data.augmentation import title_case, upper_case
from keras_transformer.data.batching import make_batches
from keras_transformer.data.sources import pairs_dataset, read_pairs
from keras_transformer.evaluation.evaluation import corpus_scores
from keras_transformer.exporters.ctranslate2 import export_ctranslate2
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.search.constraints import phrase_rows
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.training.averaging import average_last as average_last_checkpoints
from keras_transformer.training.schedules import trained_steps
from keras_transformer.training.trainer import train
from keras_transformer.translation.translator import Translator

DATA = "bible-en-de"
MOST_PHRASES = 3
NAMES = frozenset(
    "Elimelech Naomi Bethlehem Moab Boaz Ruth Orpah Esther Mordecai Haman Ahasuerus Paul Jesus Christ Israel "
    "David Abraham Aaron Jerusalem Saul Samuel Simon Joseph Benjamin Levi Eli Jordan Babylon Adam Noah Sarah "
    "Timothy Titus Silas Barnabas Judas Pilate Herod Moses Jacob Isaac Peter John Egypt Judah".split()
)
PUNCTUATION = ".,;:!?'\"()[]„“”‘’«»‚-"


def target_tokens_per_batch(
    tokenizer, config: TransformerConfig, training: TrainingConfig, batches: int
) -> tuple[float, int]:
    """(mean real target tokens per training batch, target tokens in the training split), EOS included."""
    pipeline = make_batches(
        pairs_dataset(DATA, "train"),
        tokenizer,
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        training=True,
        seed=training.seed,
    )
    counts = [int(np.count_nonzero(target.numpy() != PAD_ID)) for _, target in pipeline.take(batches)]
    _, targets = read_pairs(DATA, "train")
    split_tokens = int(tokenizer.tokenize(targets).flat_values.shape[0]) + len(targets)
    return float(np.mean(counts)), split_tokens


def scored(model, tokenizer, beam_size: int, alpha: float, limit: int | None) -> dict:
    pairs = read_pairs(DATA, "test", limit=limit)
    start = time.perf_counter()
    scores = kt.evaluate(Translator(model, tokenizer, batch_size=64, beam_size=beam_size, alpha=alpha), pairs)
    seconds = time.perf_counter() - start
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "seconds": round(seconds, 1),
        "sentences": scores["sentences"],
        "example": scores["translations"][0],
    }


def model_dir_arguments(p, limit: str | None = "only the first N verses") -> None:
    """The flags of a subcommand that scores a trained model dir's held-out verses: --model-dir,
    --checkpoint and, unless `limit` is None, --limit (its help)."""
    p.add_argument("--model-dir", required=True)
    p.add_argument("--checkpoint", default="latest")
    if limit is not None:
        p.add_argument("--limit", type=int, help=limit)


def table_arguments(parser) -> None:
    parser.add_argument("--preset", default="small")
    parser.add_argument(
        "--model-dir", help="default: runs/quality-BUDGET (must not exist: the run starts from scratch)"
    )
    parser.add_argument(
        "--sample-batches", type=int, default=300, help="batches averaged for the tokens-per-batch estimate"
    )
    parser.add_argument("--limit", type=int, help="score only the first N test verses (default: all 793)")
    parser.add_argument("--searches", nargs="+", choices=["greedy", "beam4"], default=["greedy", "beam4"])
    parser.add_argument(
        "--average-last",
        type=int,
        default=5,
        help="also score the last N checkpoints averaged (and, with --ema-decay, the moving average), beam 4; 0: not",
    )
    add_train_flags(parser)
    parser.set_defaults(time_budget_s="30m")  # the table's budget


class ValidationCurve(keras.callbacks.Callback):
    """The validation loss at each epoch end, as [step, loss] pairs."""

    def __init__(self):
        super().__init__()
        self.points = []

    def on_epoch_end(self, epoch, logs=None):
        if logs and "val_loss" in logs:
            self.points.append([trained_steps(self.model), round(float(logs["val_loss"]), 4)])


def final_weights_scored(model_dir: str, training: TrainingConfig, average_last: int, limit: int | None) -> dict:
    """Beam-4 scores of the weights a run could end with besides its last: the moving average
    (ema/, when the run kept one) and the last `average_last` checkpoints averaged (§6.1)."""
    names = (["ema"] if training.ema_decay is not None else []) + (["averaged"] if average_last else [])
    if average_last:
        average_last_checkpoints(model_dir, average_last)
    scores = {}
    for name in names:
        model, tokenizer, _ = load_model(model_dir, checkpoint=name)
        scores[name] = scored(model, tokenizer, 4, 0.6, limit)
    return scores


def table(args) -> None:
    model_dir = args.model_dir or f"runs/quality-{args.time_budget_s}"
    if ModelDir(model_dir).exists():
        raise SystemExit(f"{model_dir} exists: the table's runs start from scratch; remove it or pass --model-dir")
    train_log = []  # what `train` and the preset's budget say (`configs`)
    config, training = configs(args, args.preset, log=train_log.append)
    load_before = load_average()
    curve = ValidationCurve()
    start = time.perf_counter()
    model = train(model_dir, config, training, DATA, verbose=0, callbacks=[curve], log=train_log.append)
    train_s = time.perf_counter() - start
    steps = trained_steps(model)
    tokenizer = ModelDir(model_dir).tokenizer()
    per_batch, split_tokens = target_tokens_per_batch(tokenizer, model.config, training, args.sample_batches)
    searches = {"greedy": (1, 0.0), "beam4": (4, 0.6)}
    emit(
        record(
            benchmark="quality",
            data=DATA,
            preset=args.preset,
            budget=args.time_budget_s,
            model_dir=model_dir,
            steps=steps,
            train_s=round(train_s, 1),
            epochs=round(steps * per_batch / split_tokens, 2),
            tgt_tokens_per_s=round(steps * per_batch / train_s, 1),
            **{name: scored(model, tokenizer, *searches[name], args.limit) for name in args.searches},
            final_weights=final_weights_scored(model_dir, training, args.average_last, args.limit),
            validation_loss=curve.points,
            lowest_validation_loss=min(curve.points, key=lambda point: point[1], default=None),
            config=model.config.to_dict(),
            training={k: v for k, v in vars(training).items() if v is not None},
            train_log=train_log,
            load_before=load_before,
            load_after=load_average(),
        )
    )


def search_grid_arguments(p) -> None:
    model_dir_arguments(p, limit="only the first N pairs of the split")
    p.add_argument("--split", choices=["validation", "test"], default="validation")
    p.add_argument("--beam-sizes", type=int, nargs="+", default=[1, 4, 6, 8])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.4])


def search_grid(args) -> None:
    pairs = held_out_pairs(args.model_dir, args.limit, args.split)
    model, tokenizer, _ = load_model(args.model_dir, args.checkpoint)
    translator = Translator(model, tokenizer, batch_size=64)
    settings = [(1, 0.0)] if 1 in args.beam_sizes else []
    settings += [(beam, alpha) for beam in args.beam_sizes if beam > 1 for alpha in args.alphas]
    grid = []
    for beam_size, alpha in settings:
        search = dict(beam_size=beam_size, alpha=alpha)
        kt.evaluate(translator, (pairs.sources[:2], pairs.references[:2]), **search)  # the tracing, untimed
        start = time.perf_counter()
        scores = kt.evaluate(translator, (pairs.sources, pairs.references), **search)
        seconds = time.perf_counter() - start
        grid.append(
            dict(beam_size=beam_size, alpha=alpha, bleu=scores["bleu"], chrf=scores["chrf"], seconds=round(seconds, 1))
        )
    emit(
        record(
            benchmark="search-grid",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            split=args.split,
            pairs=len(pairs.sources),
            grid=grid,
            best=max(grid, key=lambda point: (point["bleu"], point["chrf"])),
        )
    )


def score_compare_arguments(p) -> None:
    p.add_argument("--model-dir", required=True)
    p.add_argument("--limit", type=int, help="only the first N held-out pairs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)


def score_compare(args) -> None:
    sources, targets = held_out_pairs(args.model_dir, args.limit)[:2]
    model, tokenizer, _ = load_model(args.model_dir)
    systems = {}
    with tempfile.TemporaryDirectory() as out:
        export_ctranslate2(model, tokenizer, os.path.join(out, "ctranslate2"))
        pairs = os.path.join(out, "pairs.json")
        with open(pairs, "w", encoding="utf-8") as f:
            json.dump([sources, targets, model.config.max_length], f)
        for system in ("ours", "ctranslate2"):
            job = dict(system=system, pairs=pairs, ctranslate2=os.path.join(out, "ctranslate2"))
            job.update(model_dir=args.model_dir, rounds=args.rounds, batch_size=args.batch_size)
            command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "score_worker.py")]
            command.append(json.dumps(job))
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
            result = subprocess.run(command, capture_output=True, text=True, env=env)
            if result.returncode != 0:
                raise RuntimeError(f"{system} failed:\n{result.stderr[-3000:]}")
            systems[system] = json.loads(result.stdout.strip().splitlines()[-1])
    difference = max(abs(a - b) for a, b in zip(systems["ours"]["log_probs"], systems["ctranslate2"]["log_probs"]))
    line = {"pairs": len(sources), "batch_size": args.batch_size, "rounds": args.rounds, "systems": {}}
    for name, system in systems.items():
        seconds = median(system["seconds"])
        line["systems"][name] = {"seconds": round(seconds, 4), "pairs_per_s": round(len(sources) / seconds, 1)}
    ours, theirs = (line["systems"][name]["pairs_per_s"] for name in ("ours", "ctranslate2"))
    line["ours_relative_to_ctranslate2"] = round(ours / theirs, 3)
    line["max_abs_log_prob_difference"] = round(difference, 6)
    emit(record(**line))


def bare(word: str) -> str:
    """A word without the punctuation around it and an English possessive's "'s"."""
    word = word.strip(PUNCTUATION)
    return word[:-2] if word.endswith(("'s", "’s")) else word


def name_cases(source: str, translation: str, pairs) -> list[bool]:
    """For every output word that is a name also in the source: whether it aligns to that name."""
    source_words = [bare(word) for word in source.split()]
    target_words = [bare(word) for word in translation.split()]
    aligned_to = {j: i for i, j in pairs}
    return [
        j in aligned_to and source_words[aligned_to[j]] == word
        for j, word in enumerate(target_words)
        if word in NAMES and word in source_words
    ]


def alignment_names_arguments(p) -> None:
    p.add_argument("--model-dir", action="append", required=True, help="repeat for an ensemble")
    p.add_argument("--checkpoint", default="latest")
    p.add_argument("--alignment-layer", type=int, nargs="+", default=[DecodingConfig().alignment_layer])
    p.add_argument("--limit", type=int, help="only the first N verses")


def alignment_names(args) -> None:
    sources = held_out_pairs(args.model_dir[0], args.limit).sources
    with_names = [source for source in sources if NAMES & {bare(word) for word in source.split()}]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint)
    layers = {}
    for layer in args.alignment_layer:
        layered = Translator(translator.model, translator.tokenizer, translator.decoding, alignment_layer=layer)
        results = layered.translate_with_alignments(with_names)
        cases = [case for source, (text, pairs) in zip(with_names, results) for case in name_cases(source, text, pairs)]
        layers[str(layer)] = {
            "names_in_source_and_output": len(cases),
            "aligned": sum(cases),
            "aligned_share": round(sum(cases) / len(cases), 4) if cases else None,
        }
    emit(
        record(
            benchmark="alignment_names",
            model_dirs=args.model_dir,
            verses=len(sources),
            verses_with_names=len(with_names),
            layers=layers,
        )
    )


def candidate_phrases(tokenizer, reference: str, output: str, max_length: int) -> list[str]:
    """The words and two-word spans of `reference` (letters only) that `output` lacks and that the
    tokenizer writes without the unknown token, in reference order, without repeats."""
    words = re.findall(r"[^\W\d_]+", reference)
    spans = dict.fromkeys([*words, *(" ".join(pair) for pair in zip(words, words[1:]))])
    return [phrase for phrase in spans if phrase not in output and writable(tokenizer, phrase, max_length)]


def writable(tokenizer, phrase: str, max_length: int) -> bool:
    """Whether the constraint search can hold `phrase`: no unknown token, at most max_length - 1 tokens."""
    try:
        phrase_rows(tokenizer, [phrase], 1, max_length)
    except ValueError:
        return False
    return True


def timed(translator, texts, constraints=None) -> tuple[list[str], float]:
    start = time.perf_counter()
    translations = translator.translate(texts, constraints=constraints)
    return translations, time.perf_counter() - start


def constraints_arguments(p) -> None:
    model_dir_arguments(p)
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)
    p.add_argument("--seed", type=int, default=0, help="draws the phrases")


def constraints(args) -> None:
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size)
    max_length = translator.model.config.max_length
    timed(translator, sources[:2])  # the tracing, before any timing
    timed(translator, sources[:2], [["a"], ["a"]])
    plain, _ = timed(translator, sources)
    rng = random.Random(args.seed)
    candidates = [
        candidate_phrases(translator.tokenizer, reference, output, max_length)
        for reference, output in zip(references, plain)
    ]
    drawn = [rng.sample(c, min(len(c), rng.randint(1, MOST_PHRASES))) for c in candidates]
    constrained, _ = timed(translator, sources, drawn)
    found = [phrase in output for output, phrases in zip(constrained, drawn) for phrase in phrases]

    # The slowdown per phrase: the same verses (those with three usable phrases) with 0-3 of them.
    full = [i for i, c in enumerate(candidates) if len(c) >= MOST_PHRASES]
    texts = [sources[i] for i in full]
    seconds = {}
    for count in range(MOST_PHRASES + 1):
        phrases = [rng.sample(candidates[i], MOST_PHRASES)[:count] for i in full] if count else None
        _, elapsed = timed(translator, texts, phrases) if texts else ([], 0.0)
        seconds[str(count)] = round(elapsed / len(texts), 5) if texts else None
    base = seconds["0"]
    emit(
        record(
            benchmark="constraints",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            seed=args.seed,
            verses=len(sources),
            phrases=len(found),
            phrases_per_verse={str(n): sum(len(d) == n for d in drawn) for n in range(MOST_PHRASES + 1)},
            inclusion_share=round(sum(found) / len(found), 4) if found else None,
            unconstrained=corpus_scores(plain, references),
            constrained=corpus_scores(constrained, references),
            timed_verses=len(texts),
            seconds_per_verse_by_phrases=seconds,
            slowdown_by_phrases={k: round(v / base, 3) if base and v else None for k, v in seconds.items()},
        )
    )


def shortlist_arguments(p) -> None:
    from keras_transformer.data.shortlist import FREQUENT, PER_SOURCE

    model_dir_arguments(p)
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rebuild", action="store_true", help="build the model dir's shortlist.npz again")
    p.add_argument("--per-source", type=int, default=PER_SOURCE)
    p.add_argument("--frequent", type=int, default=FREQUENT)


def shortlist(args) -> None:
    from keras_transformer.model_dir.shortlist import FILE, build_shortlist, load_shortlist

    if args.rebuild or not os.path.isfile(os.path.join(args.model_dir, FILE)):
        build_shortlist(args.model_dir, per_source=args.per_source, frequent=args.frequent, log=lambda line: None)
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    full = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size, shortlist=False)
    lexical = load_shortlist(args.model_dir, full.model.config.vocab_size)
    short = Translator(full.model, full.tokenizer, full.decoding, lexical_shortlist=lexical, shortlist=True)
    translators = {"full": full, "shortlist": short}
    for translator in translators.values():
        timed(translator, sources[:2])  # the tracing, before any timing
    seconds, outputs = {name: [] for name in translators}, {}
    for _ in range(args.rounds):
        for name, translator in translators.items():
            outputs[name], elapsed = timed(translator, sources)
            seconds[name].append(elapsed)
    results = {}
    for name, translator in translators.items():
        tokens = sum(len(ids) for ids in translator.tokenizer.tokenize(outputs[name]).to_list()) + len(sources)
        elapsed = median(seconds[name])
        results[name] = {
            **corpus_scores(outputs[name], references),
            "seconds": round(elapsed, 3),
            "target_tokens_per_second": round(tokens / elapsed, 1),
        }
    emit(
        record(
            benchmark="shortlist",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            rounds=args.rounds,
            verses=len(sources),
            per_source=int(lexical.table.shape[1]),
            frequent=len(lexical.frequent),
            full=results["full"],
            shortlist=results["shortlist"],
            bleu_drop=round(results["full"]["bleu"] - results["shortlist"]["bleu"], 2),
            identical_share=round(float(np.mean([a == b for a, b in zip(outputs["full"], outputs["shortlist"])])), 4),
            speedup=round(results["full"]["seconds"] / results["shortlist"]["seconds"], 3),
        )
    )


def paragraphs_arguments(p) -> None:
    model_dir_arguments(p)
    p.add_argument("--per-line", type=int, default=5, help="verses joined to a line")
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds, the ways alternating; medians")


def dropped_verses(tokenizer, units: list[list[str]], keep: int) -> int:
    """How many verses lie wholly past the first `keep` tokens of the unit (a line the model reads
    as one source) that holds them: `units`, each unit's verses in order, joined with a space."""
    dropped = 0
    for verses in units:
        prefixes = [" ".join(verses[: i + 1]) for i in range(len(verses))]
        counts = tokenizer.source_ids(prefixes, keep + 1)[1].numpy()  # [verses]: tokens up to each verse's end
        starts = [0, *counts[:-1]]
        dropped += int(sum(start >= keep for start in starts))
    return dropped


def paragraphs(args) -> None:
    from keras_transformer.translation.sentences import join, split

    load_before = load_average()
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size)
    keep = translator.model.config.max_length - 1
    n = args.per_line
    groups = [sources[i : i + n] for i in range(0, len(sources), n)]
    lines = [" ".join(group) for group in groups]
    wanted = [" ".join(references[i : i + n]) for i in range(0, len(references), n)]
    found, separators = split(lines, translator.tokenizer, keep + 1)  # the sentences the paragraphs' search reads
    apart = [sentence.decode("utf-8") for sentence in found.flat_values.numpy()]
    ways = {
        "per_verse": lambda: translator.translate(sources),
        "sentences_apart": lambda: translator.translate(apart),
        "paragraphs": lambda: translator.translate(lines, split=True),
        "unsplit": lambda: translator.translate(lines),
    }
    translator.translate(lines[:2], split=True)  # the tracing, before any timing
    translator.translate(lines[:2])
    seconds, results = {name: [] for name in ways}, {}
    for _ in range(args.rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            results[name] = way()
            seconds[name].append(time.perf_counter() - start)
    outputs = {
        "per_verse": [" ".join(results["per_verse"][i : i + n]) for i in range(0, len(sources), n)],
        "sentences_apart": [text.decode("utf-8") for text in join(results["sentences_apart"], separators).numpy()],
        "paragraphs": results["paragraphs"],
        "unsplit": results["unsplit"],
    }
    counts = translator.tokenizer.source_ids(found.flat_values, keep + 1)[1]  # [sentences]
    past = found.with_flat_values(tf.maximum(counts - keep, 0)).numpy()  # [lines, (k)]: tokens cut off
    cut_lines = [sum(row) > 0 for row in past]
    elapsed = {name: median(values) for name, values in seconds.items()}
    same = [paragraph == joined for paragraph, joined in zip(outputs["paragraphs"], outputs["sentences_apart"])]
    emit(
        record(
            benchmark="paragraphs",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            rounds=args.rounds,
            verses=len(sources),
            lines=len(lines),
            per_line=n,
            sentences=len(apart),
            tokens_past_max_length={"paragraphs": int(sum(sum(row) for row in past))},
            verses_dropped={  # paragraphs: at most the verses of its lines that lost a token
                "paragraphs": sum(len(group) for group, cut in zip(groups, cut_lines) if cut),
                "unsplit": dropped_verses(translator.tokenizer, groups, keep),
            },
            **{name: {**corpus_scores(outputs[name], wanted), "seconds": round(elapsed[name], 3)} for name in ways},
            paragraphs_over_sentences_apart=round(elapsed["paragraphs"] / elapsed["sentences_apart"], 3),
            paragraphs_over_per_verse=round(elapsed["paragraphs"] / elapsed["per_verse"], 3),
            same_as_apart_share=round(float(np.mean(same)), 4),  # paragraphs equal to their sentences apart
            load_before=load_before,
        )
    )


SOFTWARE = "software-en-de"


def wrap_a_word(verse: str, rng: random.Random) -> str:
    """`verse` with one of its words (drawn by `rng`) in `<b>...</b>`."""
    words = verse.split() or [""]
    drawn = rng.randrange(len(words))
    words[drawn] = f"<b>{words[drawn]}</b>"
    return " ".join(words)


def markup_arguments(p) -> None:
    model_dir_arguments(p, limit=None)
    p.add_argument("--limit", type=int, help="only the first N verses, and N software pairs with spans")
    p.add_argument("--seed", type=int, default=0, help="draws the word of each verse in <b>...</b>")


def markup(args) -> None:
    from keras_transformer.translation.markup import span_lists, stripped_texts

    translator = Translator.from_model_dir(args.model_dir, args.checkpoint)

    def exact_share(sources, outputs) -> float:
        return round(float(np.mean([a == b for a, b in zip(span_lists(sources), span_lists(outputs))])), 4)

    sources, references = read_pairs(SOFTWARE, "test")
    with_spans = [i for i, spans in enumerate(span_lists(sources)) if spans][: args.limit]
    sources, references = [sources[i] for i in with_spans], [references[i] for i in with_spans]
    protected, plain = translator.translate(sources, markup=True), translator.translate(sources)
    verses, verse_references = held_out_pairs(args.model_dir, args.limit)[:2]
    rng = random.Random(args.seed)
    tagged = [wrap_a_word(verse, rng) for verse in verses]
    tagged_outputs = translator.translate(tagged, markup=True)
    emit(
        record(
            benchmark="markup",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            seed=args.seed,
            software={
                "pairs_with_spans": len(sources),
                "exact_share": {
                    "protected": exact_share(sources, protected),
                    "unprotected": exact_share(sources, plain),
                },
                "protected": corpus_scores(protected, references),
                "unprotected": corpus_scores(plain, references),
            },
            verses={
                "verses": len(verses),
                "tags_exact_share": exact_share(tagged, tagged_outputs),
                "tagged_stripped": corpus_scores(stripped_texts(tagged_outputs), verse_references),
                "untagged": corpus_scores(translator.translate(verses), verse_references),
            },
        )
    )


def files_arguments(p) -> None:
    model_dir_arguments(p, limit=None)
    p.add_argument("--limit", type=int, help="only the first N software messages with spans, and N verses")
    p.add_argument("--seed", type=int, default=0, help="draws the word of each verse in <b>...</b> (HTML)")


def xliff_source(message: str, spans: list[str]) -> str:
    """A software message as XLIFF 1.2 <source> content: each placeholder or tag an inline <ph> code."""
    from xml.sax.saxutils import escape

    out, rest = "", message
    for k, span in enumerate(spans):
        before, _, rest = rest.partition(span)
        out += f'{escape(before)}<ph id="{k + 1}">{escape(span)}</ph>'
    return out + escape(rest)


def files(args) -> None:
    """`files`: the translate-file formats (issue 51) on held-out data: a PO and an XLIFF 1.2 of the
    software messages that hold placeholders or tags (their `test` split), an SRT (each verse a cue of
    two lines) and an HTML page (a <p> per verse, one word in <b>) of the model's held-out verses.
    BLEU/chrF of the filled targets (markup stripped) against the references, beside the same texts
    translated as plain lines; the share of units whose placeholders and inline codes come out
    exactly; seconds per 1,000 units."""
    import polib
    import srt
    from lxml import etree
    from lxml import html as lxml_html

    from keras_transformer.files import translate_file
    from keras_transformer.translation.markup import span_lists, stripped_texts

    translator = Translator.from_model_dir(args.model_dir, args.checkpoint)
    sources, references = read_pairs(SOFTWARE, "test")
    spans = span_lists(sources)
    with_spans = [i for i, found in enumerate(spans) if found][: args.limit]
    messages, message_refs = [sources[i] for i in with_spans], [references[i] for i in with_spans]
    message_spans = [spans[i] for i in with_spans]
    verses, verse_refs = held_out_pairs(args.model_dir, args.limit)[:2]
    rng = random.Random(args.seed)
    tagged = [wrap_a_word(verse, rng) for verse in verses]
    translator.translate(tagged[:2], markup=True, split=True)  # untimed warm-up: the functions traced
    translator.translate(verses[:2])
    results = {}

    def run(name, extension, content, read_targets):
        with tempfile.TemporaryDirectory() as directory:
            path, out = os.path.join(directory, f"in.{extension}"), os.path.join(directory, f"out.{extension}")
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
            start = time.perf_counter()
            translate_file(translator, path, out)
            seconds = time.perf_counter() - start
            return read_targets(out), seconds

    def entry(name, targets, seconds, units, references, exact):
        results[name] = {
            "units": units,
            "seconds_per_1000_units": round(1000 * seconds / units, 2),
            "codes_exact_share": round(float(np.mean(exact)), 4),
            "file": corpus_scores(stripped_texts(targets), references),
        }

    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8", "Language": "de"}
    for k, message in enumerate(messages):
        po.append(polib.POEntry(msgid=message, msgstr="", msgctxt=str(k)))  # msgctxt: repeated messages kept apart
    targets, seconds = run("po", "po", str(po), lambda out: [entry.msgstr for entry in polib.pofile(out)])
    exact = [sorted(a) == sorted(b) for a, b in zip(span_lists(targets), message_spans)]
    entry("po", targets, seconds, len(messages), message_refs, exact)

    units = "".join(
        f'<trans-unit id="{k}"><source>{xliff_source(message, found)}</source></trans-unit>\n'
        for k, (message, found) in enumerate(zip(messages, message_spans))
    )
    xliff = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        f'<file source-language="en" target-language="de" datatype="plaintext" original="x"><body>\n{units}'
        "</body></file></xliff>\n"
    )

    def xliff_targets(out):
        tree = etree.parse(out)
        found = list(tree.iter("{*}target"))
        codes = [sorted(ph.get("id") for ph in target.iter("{*}ph")) for target in found]
        return ["".join(target.itertext()) for target in found], codes

    (targets, codes), seconds = run("xliff", "xlf", xliff, xliff_targets)
    exact = [code == [str(k + 1) for k in range(len(found))] for code, found in zip(codes, message_spans)]
    entry("xliff", targets, seconds, len(messages), message_refs, exact)

    cues = []
    for k, verse in enumerate(verses):
        words = verse.split()
        half = (len(words) + 1) // 2
        content = " ".join(words[:half]) + ("\n" + " ".join(words[half:]) if words[half:] else "")
        cues.append(srt.Subtitle(k + 1, *(timedelta_seconds(2 * k + d) for d in (0, 1.5)), content))
    targets, seconds = run(
        "srt", "srt", srt.compose(cues), lambda out: [c.content.replace("\n", " ") for c in srt.parse(open(out).read())]
    )
    entry("srt", targets, seconds, len(verses), verse_refs, [True] * len(verses))

    page = "<!DOCTYPE html>\n<html><body>\n" + "".join(f"<p>{verse}</p>\n" for verse in tagged) + "</body></html>\n"

    def html_targets(out):
        with open(out, encoding="utf-8") as f:
            document = lxml_html.document_fromstring(f.read())
        return [lxml_html.tostring(p, encoding="unicode")[3:-4].strip() for p in document.iter("p")]

    targets, seconds = run("html", "html", page, html_targets)
    exact = [a == b for a, b in zip(span_lists(targets), span_lists(tagged))]
    entry("html", targets, seconds, len(verses), verse_refs, exact)

    start = time.perf_counter()
    plain_messages = translator.translate(stripped_texts(messages))
    plain_verses = translator.translate(verses)
    plain_seconds = time.perf_counter() - start
    emit(
        record(
            benchmark="files",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            seed=args.seed,
            formats=results,
            plain_lines={
                "software": corpus_scores(plain_messages, message_refs),
                "verses": corpus_scores(plain_verses, verse_refs),
                "seconds_per_1000_units": round(1000 * plain_seconds / (len(messages) + len(verses)), 2),
            },
        )
    )


def timedelta_seconds(seconds: float):
    import datetime

    return datetime.timedelta(seconds=seconds)


WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letters ("didn't" one word); a glossary term is whole words


def words(text: str) -> set[str]:
    """The lower-cased words of `text`."""
    return set(WORD.findall(text.lower()))


def most_common(counts: Counter, n: int) -> set[str]:
    """The `n` words of the highest counts (ties: alphabetical, so the same in every run)."""
    return set(sorted(counts, key=lambda w: (-counts[w], w))[:n])


def glossary_terms(
    train: tuple[list[str], list[str]],
    held_out_sources: list[str],
    can_write,
    terms: int,
    stopwords: int,
    min_pairs: int,
    min_share: float,
) -> list[tuple[str, str]]:
    """The glossary's rule, from the data, never from the test references: a source term is a word
    (`WORD`, lower-cased) of `held_out_sources`, not among the `stopwords` words in most training
    sources, in at least `min_pairs` of them. Its target term is the training targets' word of the
    highest Dice coefficient with it, 2 c(s, t) / (c(s) + c(t)) over the training pairs (c: pairs
    holding the word(s); Och & Ney, 2003, compare it with other association scores), written as the
    training targets most often write it. A term is kept where that word is not among the
    `stopwords` words in most training targets (a term pairs content words: "until" -> "bis" is
    none), is in at least `min_share` of the training targets whose source holds the term, and
    `can_write(target)`; the `terms` kept ones in most held-out sources (ties: alphabetical) are the
    glossary."""
    train_sources, train_targets = (list(map(words, texts)) for texts in train)
    in_sources = Counter(w for ws in train_sources for w in ws)
    in_targets = Counter(t for ts in train_targets for t in ts)
    common, common_targets = most_common(in_sources, stopwords), most_common(in_targets, stopwords)
    held = Counter(w for text in held_out_sources for w in words(text))
    candidates = {w for w in held if w not in common and in_sources[w] >= max(min_pairs, 1)}
    together = {w: Counter() for w in candidates}  # source word -> target word -> pairs holding both
    for ws, ts in zip(train_sources, train_targets):
        for w in ws & candidates:
            together[w].update(ts)
    spelling = {}  # lower-cased word -> its most frequent spelling in the training targets
    for written, _ in sorted(Counter(t for text in train[1] for t in WORD.findall(text)).items(), key=lambda x: x[1]):
        spelling[written.lower()] = written
    chosen = []
    for w in sorted(candidates, key=lambda w: (-held[w], w)):
        t, both = max(together[w].items(), key=lambda item: (item[1] / (in_sources[w] + in_targets[item[0]]), item[0]))
        if t not in common_targets and both >= min_share * in_sources[w] and can_write(spelling.get(t, t)):
            chosen.append((w, spelling.get(t, t)))
        if len(chosen) == terms:
            break
    return chosen


def fraction(flags) -> float | None:
    """The share of true ones among `flags`, to 4 places (None of none)."""
    flags = list(flags)
    return round(sum(flags) / len(flags), 4) if flags else None


def holds(output: str, target: str) -> bool:
    """Whether `output` holds `target` as whole words."""
    return re.search(rf"(?<!\w){re.escape(target)}(?!\w)", output) is not None


def glossary_arguments(p) -> None:
    model_dir_arguments(p)
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)
    p.add_argument("--terms", type=int, default=20)
    p.add_argument("--stopwords", type=int, default=100, help="the source words in most training sources: no terms")
    p.add_argument("--min-pairs", type=int, default=10, help="training sources a term must be in")
    p.add_argument("--min-share", type=float, default=0.8, help="of those, the share whose target holds its word")
    p.add_argument("--write-glossary", metavar="FILE", help="write the glossary as a TSV file (`--glossary FILE`)")


def glossary(args) -> None:
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    plain = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size)
    max_length = plain.model.config.max_length
    rule = dict(terms=args.terms, stopwords=args.stopwords, min_pairs=args.min_pairs, min_share=args.min_share)
    train = held_out_pairs(args.model_dir, split="train")[:2]
    terms = glossary_terms(train, sources, lambda target: writable(plain.tokenizer, target, max_length), **rule)
    if not terms:
        raise SystemExit(f"no source word of the held-out verses meets the glossary's rule {rule}")
    listed = kt.Glossary(tuple(terms))
    if args.write_glossary:
        listed.save(args.write_glossary)
    termed = Translator(plain.model, plain.tokenizer, plain.decoding, listed)
    hits = listed.matches(sources).numpy()  # [N, G]
    holding = [i for i, row in enumerate(hits) if row.any()]
    wanted = [[target for (_, target), hit in zip(terms, hits[i]) if hit] for i in holding]
    results = {}
    for name, translator in (("without", plain), ("with", termed)):
        translator.translate([sources[i] for i in holding[:2]])  # the tracing, before any timing
        outputs, seconds = timed(translator, sources)
        held = [outputs[i] for i in holding]
        results[name] = {
            "target_share": fraction(all(t in o for t in ts) for o, ts in zip(held, wanted)),
            "target_word_share": fraction(all(holds(o, t) for t in ts) for o, ts in zip(held, wanted)),
            **corpus_scores(outputs, references),
            "seconds": round(seconds, 3),
        }
    emit(
        record(
            benchmark="glossary",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            rule=rule,
            terms=terms,
            verses=len(sources),
            verses_with_terms=len(holding),
            reference_share=fraction(all(holds(references[i], t) for t in ts) for i, ts in zip(holding, wanted)),
            without_glossary=results["without"],
            with_glossary=results["with"],
        )
    )


UNSEEN = {  # characters and names of each kind, kept where neither the training text nor a piece has them
    "emoji": ["👑", "🦜", "🚀", "🍕", "🎻", "🌵", "🐙", "🧭"],
    "cjk": ["李明", "山田太郎", "王芳", "陳大文", "김민준", "佐藤花子"],
    "symbol": ["⚖", "∑", "☃", "♞", "✓", "⌘", "∮", "☂"],
}


def inserted(verse: str, item: str, rng: random.Random) -> str:
    """`verse` with `item` between two of its words (or before the first, after the last), drawn by `rng`."""
    parts = verse.split()
    at = rng.randint(0, len(parts))
    return " ".join([*parts[:at], item, *parts[at:]])


def spelt(row, item_ids) -> bool:
    """Whether the ids `row` hold `item_ids` (an item's byte pieces) in a row."""
    row, n = list(row), len(item_ids)
    return bool(item_ids) and any(row[k : k + n] == item_ids for k in range(len(row) - n + 1))


def unknown_arguments(p) -> None:
    model_dir_arguments(p, limit=None)
    p.add_argument("--sentences", type=int, default=30, help="the first N held-out verses, each with one item")
    p.add_argument("--seed", type=int, default=0, help="draws each verse's item and its place")
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)


def unknown(args) -> None:
    verses, references = held_out_pairs(args.model_dir, args.sentences)[:2]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size)
    tokenizer = translator.tokenizer
    pieces = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)]
    train_sources, train_targets = held_out_pairs(args.model_dir, split="train")[:2]
    seen = set("".join(train_sources + train_targets + pieces))
    usable = {kind: [item for item in items if not seen & set(item)] for kind, items in UNSEEN.items()}
    kinds = [kind for kind, items in usable.items() if items]
    if not kinds:
        raise SystemExit("every character of UNSEEN is in the training text or the vocabulary")
    rng = random.Random(args.seed)
    kind_of = [kinds[i % len(kinds)] for i in range(len(verses))]
    drawn = [rng.choice(usable[kind]) for kind in kind_of]
    texts = [inserted(verse, item, rng) for verse, item in zip(verses, drawn)]
    outputs = translator.translate(texts, markup=True, split=True)  # `translate`'s default
    unprotected = translator.translate(texts, split=True)  # `translate --markup off`
    # Where a lost item goes: its byte pieces in the source ids, in the search's best ids, in their text.
    byte_ids = {piece: i for i, piece in enumerate(pieces) if re.fullmatch(r"<0x[0-9A-F]{2}>", piece)}
    item_ids = [[byte_ids.get(f"<0x{b:02X}>") for b in item.encode("utf-8")] for item in drawn]
    item_ids = [ids if None not in ids else [] for ids in item_ids]
    source_ids, _ = tokenizer.source_ids(texts, translator.model.config.max_length)  # [B, S]
    searched = translator.decode(source_ids, 1)[0][:, 0, :]  # [B, L]: the best hypothesis
    searched_texts = [text.decode("utf-8") for text in tokenizer.detokenize(searched).numpy()]
    in_search = [spelt(row, ids) for row, ids in zip(searched.numpy(), item_ids)]
    kept, kept_unprotected = (
        [output.count(item) == 1 for item, output in zip(drawn, ways)] for ways in (outputs, unprotected)
    )

    def share(flags, kind=None) -> float | None:
        return fraction(flag for flag, k in zip(flags, kind_of) if kind in (None, k))

    emit(
        record(
            benchmark="unknown",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            seed=args.seed,
            byte_fallback=tokenizer.byte_fallback,
            sentences=len(texts),
            by_kind={kind: kind_of.count(kind) for kind in kinds},
            not_unseen=sorted(item for items in UNSEEN.values() for item in items if seen & set(item)),
            kept_share=share(kept),
            kept_share_by_kind={kind: share(kept, kind) for kind in kinds},
            unprotected_kept_share=share(kept_unprotected),
            unprotected_kept_share_by_kind={kind: share(kept_unprotected, kind) for kind in kinds},
            bytes_in_source_share=share([spelt(row, ids) for row, ids in zip(source_ids.numpy(), item_ids)]),
            bytes_in_search_share=share(in_search),
            searched_but_lost=sum(s and i not in t for s, i, t in zip(in_search, drawn, searched_texts)),
            scores={
                "verses": corpus_scores(translator.translate(verses, markup=True, split=True), references),
                "inserted": corpus_scores(outputs, references),
                "unprotected": corpus_scores(unprotected, references),
            },
            examples=[list(example) for example in zip(texts[:3], outputs, unprotected)],  # one of each kind
        )
    )


CASINGS = {"normal": None, "upper": upper_case, "title": title_case}  # the held-out verses, each way


def in_casing(case, texts: list[str]) -> list[str]:
    """`texts` as `case` (`upper_case`, `title_case`; None: as they are) writes them."""
    return texts if case is None else [text.decode("utf-8") for text in case(texts).numpy()]


def casing_arguments(p) -> None:
    p.add_argument("--preset", default="small")
    p.add_argument(
        "--model-dir", default="runs/casing", help="the runs go to PREFIX-plain and PREFIX-cased (which must not exist)"
    )
    p.add_argument("--limit", type=int, help="score only the first N held-out verses (default: all)")
    p.add_argument("--beam-size", type=int, default=1, help="default 1: greedy (beam 4: alpha 0.6)")
    add_train_flags(p)
    add_config_flags(p, DataConfig, "data (DataConfig): the augmented run's")
    p.set_defaults(time_budget_s="6m", num_layers=2, uppercase_share=0.05, titlecase_share=0.05)  # `make demo`'s


def casing(args) -> None:
    config, training = configs(args, args.preset)
    cased = DataConfig(**overrides(args, DataConfig))
    plain = dataclasses.replace(cased, **{name: 0.0 for name in augmentation.SETTINGS})
    if cased == plain:
        raise SystemExit("casing compares a run with casing or noise against one without: pass a share above 0")
    runs = {"plain": plain, "cased": cased}
    for name in runs:
        if ModelDir(f"{args.model_dir}-{name}").exists():
            raise SystemExit(
                f"{args.model_dir}-{name} exists: the runs start from scratch; remove it or pass --model-dir"
            )
    load_before = load_average()
    results = {}
    for name, data in runs.items():
        model_dir = f"{args.model_dir}-{name}"
        start = time.perf_counter()
        model = train(model_dir, config, training, data, verbose=0, log=lambda message: None)
        train_s = time.perf_counter() - start
        sources, references = held_out_pairs(model_dir, args.limit)[:2]
        alpha = 0.6 if args.beam_size > 1 else 0.0
        translator = Translator(
            model, ModelDir(model_dir).tokenizer(), batch_size=64, beam_size=args.beam_size, alpha=alpha
        )
        scores = {
            way: corpus_scores(translator.translate(in_casing(case, sources)), in_casing(case, references))
            for way, case in CASINGS.items()
        }
        results[name] = dict(model_dir=model_dir, steps=trained_steps(model), train_s=round(train_s, 1), scores=scores)
    emit(
        record(
            benchmark="casing",
            data=cased.data,
            preset=args.preset,
            budget=args.time_budget_s,
            augmentation={name: getattr(cased, name) for name in augmentation.SETTINGS},
            beam_size=args.beam_size,
            verses=len(sources),
            bleu={
                run: {name: score["bleu"] for name, score in result["scores"].items()}
                for run, result in results.items()
            },
            runs=results,
            config=model.config.to_dict(),
            training={k: v for k, v in vars(training).items() if v is not None},
            load_before=load_before,
            load_after=load_average(),
        )
    )


def write_pairs(path: str, sources: list[str], targets: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(f"{source}\t{target}\n" for source, target in zip(sources, targets))


def backtranslation_arguments(p) -> None:
    p.add_argument("--preset", default="small")
    p.add_argument("--model-dir", default="runs/bt", help="the runs go to PREFIX-reverse, -real and -bt (new)")
    p.add_argument("--limit", type=int, help="score only the first N held-out verses (default: all)")
    p.add_argument("--beam-size", type=int, default=1, help="of the scoring; default 1: greedy (beam 4: alpha 0.6)")
    p.add_argument("--sampling-topk", type=int, default=0, help="the back-translation's (1: beam search instead)")
    p.add_argument("--synthetic-weight", type=float, default=0.5, help="the share of synthetic pairs in training")
    p.add_argument("--pairs", type=int, help="use only the first N training pairs (a quick check)")
    add_train_flags(p)
    own = ("data", "valid_data", "test_data", "reverse", "user_symbols")  # set per run
    add_config_flags(p, DataConfig, "data (DataConfig): every run's", exclude=own)
    p.set_defaults(time_budget_s="30m")


def backtranslation(args) -> None:
    from keras_transformer.corpus.backtranslate import backtranslate

    config, training = configs(args, args.preset)
    runs = {name: f"{args.model_dir}-{name}" for name in ("reverse", "real", "bt")}
    for model_dir in runs.values():
        if ModelDir(model_dir).exists():
            raise SystemExit(f"{model_dir} exists: the runs start from scratch; remove it or pass --model-dir")
    os.makedirs(os.path.dirname(os.path.abspath(runs["bt"])), exist_ok=True)
    sources, targets = read_pairs(DATA, "train", limit=args.pairs)
    half = len(sources) // 2
    files = {name: f"{args.model_dir}-{name}.tsv" for name in ("a", "valid", "bt")}
    write_pairs(files["a"], sources[:half], targets[:half])
    write_pairs(files["valid"], *read_pairs(DATA, "validation", limit=500))
    mono = f"{args.model_dir}-mono.de.txt"
    with open(mono, "w", encoding="utf-8") as out:
        out.writelines(text + "\n" for text in targets[half:])
    load_before = load_average()
    results = {}
    given = overrides(args, DataConfig)

    def trained(name, data: DataConfig):
        data = dataclasses.replace(data, **given)
        start = time.perf_counter()
        model = train(runs[name], config, training, data, verbose=0, log=lambda message: None)
        results[name] = dict(
            model_dir=runs[name], steps=trained_steps(model), train_s=round(time.perf_counter() - start, 1)
        )
        return model

    trained("reverse", DataConfig(data=files["a"], valid_data=files["valid"], reverse=True))
    start = time.perf_counter()
    sampling = {"sampling_topk": args.sampling_topk} if args.sampling_topk != 1 else {}
    counts = backtranslate(mono, files["bt"], runs["reverse"], tag="<BT>", seed=training.seed, **sampling)
    bt_s = time.perf_counter() - start
    weights = f"{1 - args.synthetic_weight:g},{files['bt']}:{args.synthetic_weight:g}"
    datas = {
        "real": DataConfig(data=files["a"], valid_data=files["valid"]),
        "bt": DataConfig(data=f"{files['a']}:{weights}", valid_data=files["valid"], user_symbols="<BT>"),
    }
    test_sources, references = read_pairs(DATA, "test", limit=args.limit)
    alpha = 0.6 if args.beam_size > 1 else 0.0
    for name, data in datas.items():
        model = trained(name, data)
        translator = Translator(
            model, ModelDir(runs[name]).tokenizer(), batch_size=64, beam_size=args.beam_size, alpha=alpha
        )
        results[name]["scores"] = corpus_scores(translator.translate(test_sources), references)
    emit(
        record(
            benchmark="backtranslation",
            data=DATA,
            preset=args.preset,
            budget=args.time_budget_s,
            parallel_pairs=half,
            monolingual_lines=len(targets) - half,
            synthetic_pairs=counts["pairs"],
            backtranslation_failed=counts["failed"],
            backtranslation_s=round(bt_s, 1),
            decoding="beam" if args.sampling_topk == 1 else f"sampling_topk {args.sampling_topk}",
            synthetic_weight=args.synthetic_weight,
            verses=len(test_sources),
            beam_size=args.beam_size,
            bleu={name: results[name]["scores"]["bleu"] for name in datas},
            bleu_gain=round(results["bt"]["scores"]["bleu"] - results["real"]["scores"]["bleu"], 2),
            runs=results,
            config=config.to_dict(),
            training={k: v for k, v in vars(training).items() if v is not None},
            load_before=load_before,
            load_after=load_average(),
        )
    )


COMMANDS = {
    "table": (table_arguments, table, "the README's quality table: train a preset for a budget, then score it"),
    "search-grid": (search_grid_arguments, search_grid, "beam size and length penalty on the validation split"),
    "score-compare": (score_compare_arguments, score_compare, "scoring given pairs: ours against CTranslate2"),
    "alignment-names": (alignment_names_arguments, alignment_names, "how well word alignments pair names"),
    "constraints": (constraints_arguments, constraints, "lexically constrained decoding: inclusion, BLEU, cost"),
    "shortlist": (shortlist_arguments, shortlist, "the vocabulary shortlist: BLEU and speed with and without"),
    "paragraphs": (paragraphs_arguments, paragraphs, "verses five to a line as paragraphs: none dropped, BLEU, time"),
    "markup": (markup_arguments, markup, "markup and placeholders: kept exactly? BLEU with and without protection"),
    "glossary": (glossary_arguments, glossary, "a glossary of 20 terms from the data: targets kept, BLEU, time"),
    "unknown": (unknown_arguments, unknown, "emoji, CJK names, symbols absent from training: kept in the output?"),
    "files": (files_arguments, files, "translate-file's formats: BLEU of the filled targets, codes exact, time"),
    "casing": (casing_arguments, casing, "casing at training time: BLEU on normal, ALL CAPS, Title Case verses"),
    "backtranslation": (
        backtranslation_arguments,
        backtranslation,
        "half the Bible plus the other half back-translated",
    ),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
