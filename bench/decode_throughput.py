"""Decoding throughput and batch-1 latency at base dimensions with random weights.

The work is fixed: `--sentences` x `--source-length` random source tokens, exactly `--generate`
target tokens per hypothesis (EOS is never chosen; see `forbid_eos`). Prints one JSON line with
target tokens/s for the batch and the latency of one sentence (both after an untimed warm-up
call per shape, so tracing and XLA compilation are not timed):

    python bench/decode_throughput.py --search greedy|beam \
        --runner python|xla|savedmodel|python_bfloat16|savedmodel_bfloat16|tflite|tflite_int8|
                 keras_hub|keras_hub_xla|ctranslate2|ctranslate2_int8

Runners (entries of `RUNNERS`), all on the same random weights (keras-hub: its own, same shapes):

- `python`: `keras_transformer.beam_search` (a `tf.function`) called from Python; greedy is
  beam size 1, alpha 0 (what `greedy_search` calls).
- `xla`: the same `search_beams` with `static_shapes=True` (a fixed-size cache) in a
  `tf.function(jit_compile=True)`, compiled once per input shape (batch 16 and batch 1).
- `savedmodel`: the package's ids-only export (`serving.TranslationModule(model, decode=...)`,
  saved to a temporary directory), loaded with `tf.saved_model.load` in this process, called
  through its `serving_default` (= `translate_ids`) signature.
- `python_bfloat16`, `savedmodel_bfloat16`: `python` and `savedmodel` on the model in bf16
  (`Transformer.with_dtype("bfloat16")`: weights and matmuls in bf16, LayerNorm and the search's
  log-softmax in float32).
- `tflite`: the TFLite builtins model of that same module (`export.tflite_models`: weights frozen
  into constants), run by LiteRT's `Interpreter` with as many threads as TensorFlow's intra-op
  pool; its signature runner resizes the input to the batch and re-allocates on every call
  (timed, as a deployment pays it). LiteRT's default delegate (XNNPACK) takes what it can.
  `tflite_int8`: the same with dynamic-range int8 weights (`export`'s translator_int8.tflite).
- `ctranslate2`, `ctranslate2_int8`: CTranslate2 4.8's `Translator` on the same weights
  (`peers.ctranslate2_translator`: our CTranslate2 export, float32 or quantized to int8 at load),
  the same source tokens (no EOS appended), its beam search with `length_penalty=alpha`
  (|y|^alpha, not GNMT's: no matter here, every hypothesis has the same length), the best
  hypothesis returned; as many threads as TensorFlow's intra-op pool, `OMP_WAIT_POLICY=PASSIVE`.
- `keras_hub`, `keras_hub_xla`: keras-hub 0.32's `BeamSampler(num_beams=K)` or `GreedySampler`
  driving `peers.build_keras_hub`'s layers with their key/value caches (`peers.keras_hub_generate`),
  in a `tf.function`, without and with XLA.

The exported search is the bench's, not `paper_beam_search`: the export's `decode` argument
sets the length rule, and `--source-length 32` with the paper's limit |source| + 50 would decode
82 tokens, not 64. Every runner is checked to produce exactly `--generate` tokens per hypothesis
(`generated_tokens` in the record is what the first call produced).

Not apples-to-apples with keras-hub (read its figures as "keras-hub's standard generation
path", not as the same algorithm): its beam sampler has no length penalty (the record's `alpha`
is null) and no finished set, keeps K candidates per step (ours 2K) and returns only the best
beam; it takes softmax then log (ours log-softmax); its sampler's cache holds the encoder
output and the source mask besides the two key/value caches, and every leaf is reordered every
step; one extra decoder call on the start token builds the cross-attention cache (65 decoder
calls for 64 tokens, as in keras-hub's Bart); learned positions and an untied output `Dense`
(same FLOPs). Greedy is the same algorithm on both sides.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import os
import tempfile
import time

import numpy as np
import tensorflow as tf
from common import FIRST_TOKEN, WORKLOADS, emit, load_average, median, record
from peers import ctranslate2_translator, keras_hub_generate, numbered_tokens

from keras_transformer import Transformer, beam_search
from keras_transformer.exporters.signatures import IDS_SPEC, TranslationModule
from keras_transformer.exporters.tensorflow import ids_saved_model_dir, tflite_models
from keras_transformer.inference.decoding import search_beams
from keras_transformer.special_tokens import EOS_ID, PAD_ID


def forbid_eos(model) -> None:
    """Pin the EOS logit to -d_model so that no search ever ends a hypothesis early.

    The last decoder LayerNorm's normalised output n has zero mean, so with its beta set to 1 and
    the EOS embedding row to -1 the logit is (n + 1) . (-1) = -d_model, far below every other
    (random) logit. The weights change, not the code: every execution path sees the same model.
    """
    norm = (
        model.decoder.final_layer_norm or model.decoder.blocks[-1].feed_forward_residual.layer_norm
    )  # pre-LN or post-LN
    norm.beta.assign(np.ones(norm.beta.shape, "float32"))
    table = model.embedding.embeddings.numpy()
    table[EOS_ID] = -1.0
    model.embedding.embeddings.assign(table)


def search_settings(search: str, generate: int, beam_size: int, alpha: float) -> dict:
    """Static arguments of `beam_search`/`search_beams` that give exactly `generate` tokens per
    hypothesis: the limit a * |source| + b with a = 0, b = `generate` (the default search, whose
    cache grows; XLA's `static_shapes` search takes the same length from the input's shape)."""
    if search == "greedy":
        beam_size, alpha = 1, 0.0
    return dict(beam_size=beam_size, alpha=alpha, length_a=0.0, length_b=generate)


def python_runner(model, settings: dict):
    return lambda ids: beam_search(model, ids, **settings).ids


def xla_runner(model, settings: dict):
    return tf.function(lambda ids: search_beams(model, ids, **settings, static_shapes=True)[0], jit_compile=True)


def exported(model, settings: dict) -> TranslationModule:
    """The package's ids-only export module, decoding with the bench's search."""
    return TranslationModule(model, decode=functools.partial(beam_search, **settings))


def savedmodel_runner(model, settings: dict):
    with tempfile.TemporaryDirectory() as out:
        path = ids_saved_model_dir(out, "translator")
        exported(model, settings).save(path)
        signature = tf.saved_model.load(path).signatures["serving_default"]  # variables are read in now
    return lambda ids: signature(source_ids=tf.constant(ids))["ids"]


def tflite_runner(model, settings: dict, int8: bool = False):
    from ai_edge_litert.interpreter import Interpreter

    (flatbuffer,) = tflite_models(exported(model, settings).translate_ids, IDS_SPEC, quantize=(int8,))
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
    runner = Interpreter(model_content=flatbuffer, num_threads=threads).get_signature_runner()
    return lambda ids: runner(source_ids=ids)["ids"]


def keras_hub_runner(model, settings: dict, jit_compile: bool = False):
    search = "greedy" if settings["beam_size"] == 1 else "beam"
    run = keras_hub_generate(model.config, search, settings["b"], settings["beam_size"])
    return tf.function(run, jit_compile=jit_compile)


def ctranslate2_runner(model, settings: dict, compute_type: str = "float32"):
    config = model.config
    tokens = numbered_tokens(config)
    ids = {token: i for i, token in enumerate(tokens)}
    translator = ctranslate2_translator(model, tokens, compute_type, add_source_eos=False)

    def run(source_ids):
        sources = [[tokens[i] for i in row if i != PAD_ID] for row in source_ids]
        results = translator.translate_batch(
            sources,
            beam_size=settings["beam_size"],
            length_penalty=settings["alpha"],
            max_decoding_length=settings["b"],
        )
        hypotheses = [[ids[token] for token in result.hypotheses[0]] for result in results]
        out = np.full((len(hypotheses), 1, max(map(len, hypotheses))), PAD_ID, np.int32)  # [B, 1, L]
        for row, hypothesis in zip(out, hypotheses):
            row[0, : len(hypothesis)] = hypothesis
        return out

    return run


# name: runner(model, search_settings(...)) -> run(source_ids [B, S] int32) -> ids [B, beam, L]
RUNNERS = {
    "python": python_runner,
    "xla": xla_runner,
    "savedmodel": savedmodel_runner,
    "python_bfloat16": lambda model, settings: python_runner(model.with_dtype("bfloat16"), settings),
    "savedmodel_bfloat16": lambda model, settings: savedmodel_runner(model.with_dtype("bfloat16"), settings),
    "tflite": tflite_runner,
    "tflite_int8": functools.partial(tflite_runner, int8=True),
    "keras_hub": keras_hub_runner,
    "keras_hub_xla": functools.partial(keras_hub_runner, jit_compile=True),
    "ctranslate2": ctranslate2_runner,
    "ctranslate2_int8": functools.partial(ctranslate2_runner, compute_type="int8"),
}
NO_LENGTH_PENALTY = {"keras_hub", "keras_hub_xla"}  # no alpha: the record says null
PACKAGES = {
    "tflite": "ai-edge-litert",
    "tflite_int8": "ai-edge-litert",
    "keras_hub": "keras-hub",
    "keras_hub_xla": "keras-hub",
    "ctranslate2": "ctranslate2",
    "ctranslate2_int8": "ctranslate2",
}  # beyond record()'s versions


def time_calls(run, ids, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(run(ids))  # materialise the result: the search has finished
        times.append(time.perf_counter() - start)
    return times


def add_work_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, search and fixed work (shared with `decode_compare.py`)."""
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="base", help="model sizes")
    parser.add_argument("--search", choices=["greedy", "beam"], default="greedy")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty (Wu et al., 2016)")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis, forced")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls (after one untimed call)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_work_arguments(parser)
    parser.add_argument("--runner", choices=sorted(RUNNERS), default="python")
    return parser.parse_args(argv)


def build_model(workload: str):
    """Our Transformer at the workload's sizes, random weights, EOS forbidden."""
    config = WORKLOADS[workload].config
    model = Transformer(config)
    model.build()
    forbid_eos(model)
    return model


def source_batch(config, sentences: int, source_length: int) -> np.ndarray:
    """[sentences, source_length] int32 random non-reserved tokens, no padding, the same every run."""
    rng = np.random.default_rng(0)
    return rng.integers(FIRST_TOKEN, config.vocab_size, size=(sentences, source_length), dtype=np.int32)


def prepare(name: str, model, batch, args):
    """Runner `name`, warmed on the batch and on its first sentence (tracing, XLA compilation,
    allocation are not timed), with the work checked. Returns (run, generated tokens per hypothesis)."""
    run = RUNNERS[name](model, search_settings(args.search, args.generate, args.beam_size, args.alpha))
    ids = np.asarray(run(batch))  # [B, beam, L]
    generated = (ids != PAD_ID).sum(axis=-1)  # [B, beam]
    if not (generated == args.generate).all() or (ids == EOS_ID).any():
        raise SystemExit(
            f"{name}: the work is not fixed: generated lengths {sorted(set(generated.ravel()))}, want {args.generate}"
        )
    run(batch[:1])
    return run, int(generated.max())


def measure(run, batch, repeats: int) -> tuple[float, float]:
    """(median seconds of the batch, median seconds of its first sentence alone)."""
    return median(time_calls(run, batch, repeats)), median(time_calls(run, batch[:1], repeats))


def runner_fields(name: str, args, generated: int, batch_s: float, latency_s: float) -> dict:
    beam = args.search == "beam"
    return dict(
        runner=name,
        beam_size=args.beam_size if beam else 1,
        alpha=args.alpha if beam and name not in NO_LENGTH_PENALTY else None,
        generated_tokens=generated,
        batch_s_median=round(batch_s, 4),
        tgt_tokens_per_s=round(args.sentences * generated / batch_s, 1),
        batch1_latency_s=round(latency_s, 4),
        runner_package=f"{PACKAGES[name]}=={importlib.metadata.version(PACKAGES[name])}" if name in PACKAGES else None,
    )


def main(argv=None):
    args = parse_args(argv)
    load_before = load_average()
    model = build_model(args.workload)
    batch = source_batch(model.config, args.sentences, args.source_length)
    run, generated = prepare(args.runner, model, batch, args)
    batch_s, latency_s = measure(run, batch, args.repeats)
    emit(
        record(
            benchmark="decode_throughput",
            workload=args.workload,
            search=args.search,
            sentences=args.sentences,
            source_length=args.source_length,
            **runner_fields(args.runner, args, generated, batch_s, latency_s),
            repeats=args.repeats,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
