"""Our decoding systems for the workers of `decoding.py forced` and `verses` (TensorFlow side;
CTranslate2's are in `decode_worker.py`, which never imports TensorFlow).

`forced` work: base dimensions (or `--workload`), random weights, a fixed batch of random source
tokens, exactly `generate` target tokens per hypothesis (EOS is never chosen; see `forbid_eos`).
Runners (entries of `FORCED_RUNNERS`), all on the same seeded random weights (keras-hub: its own,
same shapes):

- `python`: `keras_transformer.beam_search` (a `tf.function`) called from Python; greedy is
  beam size 1, alpha 0 (what `greedy_search` calls).
- `xla`: the same `search_beams` with `static_shapes=True` (a fixed-size cache) in a
  `tf.function(jit_compile=True)`, compiled once per input shape (the batch and batch 1).
- `savedmodel`: the package's ids-only export (`serving.TranslationModule(model, decode=...)`,
  saved to a temporary directory), loaded with `tf.saved_model.load` in this process, called
  through its `serving_default` (= `translate_ids`) signature.
- `python_bfloat16`, `savedmodel_bfloat16`: `python` and `savedmodel` on the model in bf16
  (`Transformer.with_dtype("bfloat16")`: weights and matmuls in bf16, LayerNorm and the search's
  log-softmax in float32).
- `python_int8`, `savedmodel_int8`: `python` and `savedmodel` on the model with int8 weights
  (`Transformer.with_int8`: every weight matrix int8 with a float scale per unit, float
  activations; `export`'s saved_model/translator_int8/ holds the same weights).
- `tflite`: the TFLite builtins model of that same module (`export.tflite_models`: weights frozen
  into constants), run by LiteRT's `Interpreter` with as many threads as TensorFlow's intra-op
  pool; its signature runner resizes the input to the batch and re-allocates on every call
  (timed, as a deployment pays it). LiteRT's default delegate (XNNPACK) takes what it can.
  `tflite_int8`: the same with dynamic-range int8 weights (`export`'s translator_int8.tflite).
- `keras_hub`, `keras_hub_xla`: keras-hub 0.32's `BeamSampler(num_beams=K)` or `GreedySampler`
  driving `peers.build_keras_hub`'s layers with their key/value caches (`peers.keras_hub_generate`),
  in a `tf.function`, without and with XLA.

The exported search is the bench's, not the default `beam_search`: the export's `decode` argument
sets the length rule, and a 32-token source with the paper's limit |source| + 50 would decode
82 tokens, not 64.

Not apples-to-apples with keras-hub (read its figures as "keras-hub's standard generation
path", not as the same algorithm): its beam sampler has no length penalty (the record's `alpha`
is null) and no finished set, keeps K candidates per step (ours 2K) and returns only the best
beam; it takes softmax then log (ours log-softmax); its sampler's cache holds the encoder
output and the source mask besides the two key/value caches, and every leaf is reordered every
step; one extra decoder call on the start token builds the cross-attention cache (65 decoder
calls for 64 tokens, as in keras-hub's Bart); learned positions and an untied output `Dense`
(same FLOPs). Greedy is the same algorithm on both sides.

`verses` work: a trained model's `Translator` (what `keras-transformer translate` runs), text to
text, with its search given by `VERSES_SYSTEMS`: in the graph (`python`; `cli`, the same in a
process whose TensorFlow runs one thread per op, as `keras-transformer translate` sets it up,
unless `--intra-threads` says otherwise: `decode_worker.threads`), compiled by XLA (`xla`,
`beam_search(jit_compile=True)`, `export --jit-compile` for `savedmodel_xla`), through the ids-only
SavedModel (`savedmodel`, the signature TF Serving runs as `translate_ids`), in bf16 (`*_bfloat16`,
`--dtype bfloat16`), with int8 weights (`*_int8`, `--int8`), over the model dir's vocabulary
shortlist (`*_shortlist`, `--shortlist`: shortlist.npz, the SavedModel holding it as `export
--shortlist` does), or with the exact stopping rule (`*_exact`, `patience=None`: a sentence stops
when no alive hypothesis can beat the kept ones; the others stop a sentence once K of its
hypotheses have ended, `patience=1`, our default, as CTranslate2 does).
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading

import keras
import numpy as np
import tensorflow as tf
from common import FIRST_TOKEN, WORKLOADS
from peers import keras_hub_generate

from keras_transformer import Transformer, beam_search
from keras_transformer.config import DecodingConfig, SearchSettings
from keras_transformer.exporters.signatures import IDS_SPEC, TranslationModule, variables
from keras_transformer.exporters.tensorflow import ids_saved_model_dir, tflite_models
from keras_transformer.model_dir.shortlist import load_shortlist
from keras_transformer.search.decoding import decode_limits, search_beams
from keras_transformer.special_tokens import EOS_ID, PAD_ID
from keras_transformer.translation.translator import Translator

SEED = 0  # every process builds the same random weights


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
    return tf.function(
        lambda ids: search_beams(model, ids, DecodingConfig(**settings), static_shapes=True)[0], jit_compile=True
    )


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
    run = keras_hub_generate(model.config, search, settings["length_b"], settings["beam_size"])
    return tf.function(run, jit_compile=jit_compile)


# name: runner(model, search_settings(...)) -> run(source_ids [B, S] int32) -> ids [B, beam, L]
FORCED_RUNNERS = {
    "python": python_runner,
    "xla": xla_runner,
    "savedmodel": savedmodel_runner,
    "python_bfloat16": lambda model, settings: python_runner(model.with_dtype("bfloat16"), settings),
    "savedmodel_bfloat16": lambda model, settings: savedmodel_runner(model.with_dtype("bfloat16"), settings),
    "python_int8": lambda model, settings: python_runner(model.with_int8(), settings),
    "savedmodel_int8": lambda model, settings: savedmodel_runner(model.with_int8(), settings),
    "tflite": tflite_runner,
    "tflite_int8": functools.partial(tflite_runner, int8=True),
    "keras_hub": keras_hub_runner,
    "keras_hub_xla": functools.partial(keras_hub_runner, jit_compile=True),
}
PACKAGES = {
    "tflite": "ai-edge-litert",
    "tflite_int8": "ai-edge-litert",
    "keras_hub": "keras-hub",
    "keras_hub_xla": "keras-hub",
}  # beyond record()'s versions


def build_model(workload: str):
    """Our Transformer at the workload's sizes, seeded random weights, EOS forbidden."""
    keras.utils.set_random_seed(SEED)
    model = Transformer(WORKLOADS[workload].config)
    model.build()
    forbid_eos(model)
    return model


def source_batch(config, sentences: int, source_length: int) -> np.ndarray:
    """[sentences, source_length] int32 random non-reserved tokens, no padding, the same every run."""
    rng = np.random.default_rng(SEED)
    return rng.integers(FIRST_TOKEN, config.vocab_size, size=(sentences, source_length), dtype=np.int32)


def forced_runner(job: dict):
    """run(source_ids [B, S]) -> ids [B, beam, L] of `job["system"]` on `job["workload"]`'s model."""
    model = build_model(job["workload"])
    return FORCED_RUNNERS[job["system"]](model, job["settings"])


class CountingTranslator(Translator):
    """Our `Translator` with its search given as `search(source_ids [B, S], n) -> (ids [B, n', L],
    scores [B, n'])` (n' >= n: the SavedModel's `translate_ids` returns every beam), counting the
    tokens of the best hypotheses (EOS included)."""

    def __init__(self, model, tokenizer, search, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self.search = search
        self.target_tokens = 0
        self._counting = threading.Lock()  # batches are searched on threads of their own

    def decode(self, source_ids, n=None):
        ids, scores = self.search(source_ids, n)
        tokens = int(tf.math.count_nonzero(ids[:, 0] != PAD_ID))
        with self._counting:
            self.target_tokens += tokens
        return ids[:, :n], scores[:, :n]  # [B, n, L], [B, n]


def padded_limits(rows: list[np.ndarray], max_length: int) -> list[int]:
    """Our per-sentence length limits (`decode_limits`) of source id rows (each ending with EOS)."""
    batch = np.full((len(rows), max([1, *map(len, rows)])), PAD_ID, np.int32)  # [N, longest]
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return decode_limits(batch, max_length).numpy().tolist()


# name: (through the SavedModel, XLA, patience, dtype or "int8": int8 weights, over the shortlist)
VERSES_SYSTEMS = {
    "python": (False, False, SearchSettings.patience, None, False),
    "cli": (False, False, SearchSettings.patience, None, False),  # in a process set up as `translate`'s
    "xla": (False, True, SearchSettings.patience, None, False),
    "savedmodel": (True, False, SearchSettings.patience, None, False),
    "savedmodel_xla": (True, True, SearchSettings.patience, None, False),
    "python_bfloat16": (False, False, SearchSettings.patience, "bfloat16", False),
    "savedmodel_bfloat16": (True, False, SearchSettings.patience, "bfloat16", False),
    "python_int8": (False, False, SearchSettings.patience, "int8", False),
    "savedmodel_int8": (True, False, SearchSettings.patience, "int8", False),
    "python_shortlist": (False, False, SearchSettings.patience, None, True),
    "savedmodel_shortlist": (True, False, SearchSettings.patience, None, True),
    "python_int8_shortlist": (False, False, SearchSettings.patience, "int8", True),
    "savedmodel_int8_shortlist": (True, False, SearchSettings.patience, "int8", True),
    "python_exact": (False, False, None, None, False),
    "savedmodel_exact": (True, False, None, None, False),
}


def verses_translator(job: dict):
    """translate(texts) -> (translations, target tokens) of `job["system"]`: our `Translator` on the
    model dir's model, its search in the graph or compiled by XLA, in Python or through the
    SavedModel, in float32 or bf16 or with int8 weights, over the whole vocabulary or the model dir's
    shortlist, with `patience` 1 or the exact rule; `job["inter_threads"]`
    batches at once (0: the Translator's default, `concurrent_batches()`, which
    `translate.concurrent_batches` tells). Through the SavedModel, each batch is a call of its
    signature, as a TF Serving client with that many requests in flight sends it."""
    from keras_transformer.model_dir import load_model

    savedmodel, jit_compile, patience, dtype, shortlisted = VERSES_SYSTEMS[job["system"]]
    model, tokenizer, _ = load_model(job["model_dir"], job["checkpoint"])
    if dtype:
        model = model.with_int8() if dtype == "int8" else model.with_dtype(dtype)
    shortlist = load_shortlist(job["model_dir"], model.config.vocab_size) if shortlisted else None
    if shortlist and savedmodel:
        shortlist = variables(shortlist)  # as the export holds it
    settings = dict(beam_size=job["beam_size"], alpha=job["alpha"], patience=patience)
    decode = functools.partial(beam_search, **settings, jit_compile=jit_compile, lexical_shortlist=shortlist)
    if savedmodel:
        with tempfile.TemporaryDirectory() as out:
            path = ids_saved_model_dir(out, "translator")
            TranslationModule(model, decode=decode, lexical_shortlist=shortlist).save(path)
            signature = tf.saved_model.load(path).signatures["serving_default"]  # variables are read in now

        def search(source_ids, n):
            result = signature(source_ids=tf.constant(source_ids))  # every beam
            return result["ids"], result["scores"]
    else:

        def search(source_ids, n):
            result = decode(model, source_ids, nbest=n)
            return result.ids, result.scores

    def translator():
        return CountingTranslator(
            model, tokenizer, search, batch_size=job["batch_size"], concurrent_batches=job["inter_threads"], **settings
        )

    def translate(texts):
        counting = translator()
        return counting.translate(texts), counting.target_tokens

    translate.concurrent_batches = translator().concurrent_batches()
    return translate
