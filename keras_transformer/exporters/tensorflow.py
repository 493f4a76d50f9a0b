"""`keras-transformer export`: every deployment artifact of a trained model, from one command.

    OUT/saved_model/<name>/N/        serving_default (text -> translation, score), translate_ids,
                                     translate_nbest, translate_with_prefix, translate_constrained,
                                     score, sample, translate_with_options,
                                     translate_with_alignments, translate_with_scores,
                                     translate_markup
                                     (exporters/signatures.py); needs
                                     tensorflow-text's ops (TF Serving links them);
                                     assets.extra/tf_serving_warmup_requests
    OUT/saved_model/<name>_ids/N/    serving_default = translate_ids; TensorFlow ops only
    OUT/saved_model/<name>_int8/N/   <name>'s signatures with int8 weights (`Transformer.with_int8`:
                                     every weight matrix in a quarter of the bytes, float
                                     activations); TF Serving serves it as another model
    OUT/translator.tflite            source_ids -> ids, scores; TFLite builtin ops only
    OUT/translator_int8.tflite       the same with dynamic-range quantized (int8) weights
    OUT/translator_text.tflite       text -> ids, scores; builtins + tensorflow-text's
                                     FastSentencepieceTokenize custom op
    OUT/tokenizer.model              the SentencePiece model, to tokenize and detokenize on a device
    OUT/tokenizer.target.model       a model of two SentencePiece models (OPUS-MT's): the target
                                     side's, to detokenize with (tokenizer.model: the source side's)
    OUT/translator.json              what a device needs besides the models (`tflite_metadata`)
    OUT/glossary.tsv                 with `export --glossary FILE`: the terms the text SavedModels'
                                     `translate` holds (the ids-only and TFLite models hold none)
    OUT/saved_model/batching_parameters.txt, OUT/saved_model/models.config
                                     with `export --batching`: TF Serving's server-side batching with
                                     `serve`'s policy, and the three SavedModels' model config
                                     (`exporters/batching.py`)

With the `shortlist` setting (by default where the model dir has one) both SavedModels hold the model dir's
vocabulary shortlist and search over it (`search/shortlist.py`; translator.json's
`saved_model_shortlist`); the TFLite models never do (static shapes there), nor does `score`.

`tflite=False` (`export --no-tflite`) writes the SavedModels, the tokenizer and translator.json
only (its `models` then empty), for a deployment to TF Serving alone: the three TFLite
conversions are about half of an export's time. TFLite models that an earlier export wrote to
OUT are removed then, since they would not be the served version's.

N is the next version number under each SavedModel's base path: TF Serving serves the highest,
so exporting again into the same OUT rolls the served model forward (the TFLite files are
replaced). The TFLite models take any batch and length: resize the input tensor, then allocate.
Export needs no optional package: the warmup records are written with TensorFlow's protos alone.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

from keras_transformer.config import DecodingConfig
from keras_transformer.data.tokenizer import UNK_ID, target_path
from keras_transformer.exporters.batching import write_batching
from keras_transformer.exporters.signatures import IDS_SPEC, TEXT_SPEC, TranslationModule, variables
from keras_transformer.search.controls import suppressed_ids
from keras_transformer.search.decoding import beam_search, search_beams
from keras_transformer.search.inputs import user_modifiers
from keras_transformer.search.search import graph_function
from keras_transformer.search.shortlist import check_shortlist
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID
from keras_transformer.translation.glossary import Glossary

INT8_SUFFIX = "_int8"  # the int8 SavedModel's name: <name>_int8
WARMUP_TEXTS = ("In the beginning God created the heavens and the earth.", "Jesus wept.")
METADATA = "translator.json"
# translator.json's note on a byte-fallback tokenizer (data/tokenizer.py): what the TFLite text model cannot do
BYTE_FALLBACK = (
    "the tokenizer spells characters outside its pieces as UTF-8 byte pieces (SentencePiece's byte_fallback), "
    "which the SavedModels and SentencePiece (tokenizer.model) encode and decode; the text TFLite model "
    "(tensorflow-text's fast SentencePiece) encodes such characters as unk_id: to keep them on a device, encode "
    "with SentencePiece and run the ids model"
)
GLOSSARY = "glossary.tsv"  # the terms the text SavedModels' translate holds, as export --glossary read them


def saved_model_dir(out: str, name: str, version: int = 1) -> str:
    return os.path.join(out, "saved_model", name, str(version))


def ids_saved_model_dir(out: str, name: str, version: int = 1) -> str:
    return os.path.join(out, "saved_model", f"{name}_ids", str(version))


def versions(base: str) -> list[int]:
    """The version numbers of the SavedModels under a TF Serving base path, ascending."""
    names = os.listdir(base) if os.path.isdir(base) else []
    return sorted(int(name) for name in names if name.isdigit())


def int8_saved_model_dir(out: str, name: str, version: int = 1) -> str:
    return os.path.join(out, "saved_model", f"{name}{INT8_SUFFIX}", str(version))


def next_version(out: str, name: str) -> int:
    """One above every version of the SavedModels of `name` in `out` (1 in a new OUT), so that
    TF Serving, which serves the highest version, picks the new export up."""
    dirs = (saved_model_dir, ids_saved_model_dir, int8_saved_model_dir)
    bases = [os.path.dirname(path(out, name)) for path in dirs]
    return 1 + max((v for base in bases for v in versions(base)), default=0)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2): a string, bytes or a message."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(model_name: str, signature: str, inputs: dict) -> bytes:
    """A serialized `tensorflow.serving.PredictionLog` holding one PredictRequest, encoded with
    TensorFlow's TensorProto and the field numbers of tensorflow_serving/apis/*.proto
    (PredictionLog.predict_log = 6, PredictLog.request = 1, PredictRequest.model_spec = 1 and
    inputs = 2, a map of key 1 and value 2; ModelSpec.name = 1 and signature_name = 3), so that
    export needs no tensorflow-serving-api."""
    spec = _field(1, model_name.encode("utf-8")) + _field(3, signature.encode("utf-8"))
    entries = b"".join(
        _field(2, _field(1, key.encode("utf-8")) + _field(2, tf.make_tensor_proto(value).SerializeToString()))
        for key, value in inputs.items()
    )
    return _field(6, _field(1, _field(1, spec) + entries))


def write_warmup_requests(path: str, model_name: str, signature: str, inputs: dict) -> None:
    """TF Serving's warmup file: PredictionLog records that the server replays before serving
    (`assets.extra/tf_serving_warmup_requests`), so the first user request pays no tracing."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(prediction_log(model_name, signature, inputs))


TFLITE_MODELS = {"ids": "translator.tflite", "ids_int8": "translator_int8.tflite", "text": "translator_text.tflite"}


def tflite_metadata(
    config,
    decoding: DecodingConfig,
    model_dirs: Sequence[str] = (),
    lang_ids: dict[str, int] | None = None,
    tflite: bool = True,
    checkpoint: dict | None = None,
    target_tokenizer: bool = False,
) -> dict:
    """`OUT/translator.json`: what a device needs besides the TFLite models: the input limit, the
    reserved ids, the search the models run (every `DecodingConfig` field), and the steps around
    them; also the SavedModels' dtype and the model dir exported (for `export --check`), and a
    multilingual model's target-language ids (`lang_ids`), which a device puts first in source_ids;
    without `tflite` (an export of SavedModels only), `models` is empty; `checkpoint`: the weights
    exported, {"name": "latest", "averaged", "best", "ema" or a path, "paths": the checkpoint of
    each model dir}, with which `export --check` compares the artifacts; `target_tokenizer`: the
    tokenizer has a target side's model of its own (tokenizer.target.model, to detokenize with)."""
    multilingual = {"target_lang_ids": dict(lang_ids)} if lang_ids else {}
    return {
        **multilingual,
        "models": dict(TFLITE_MODELS) if tflite else {},
        "tokenizer": "tokenizer.model",
        **({"target_tokenizer": target_path("tokenizer.model")} if target_tokenizer else {}),
        "vocab_size": config.vocab_size,
        "max_length": config.max_length,
        "pad_id": PAD_ID,
        "start_id": START_ID,
        "eos_id": EOS_ID,
        "unk_id": UNK_ID,
        **tflite_decoding(decoding).to_dict(),
        "input": "source_ids int32 [batch, length]: SentencePiece ids, at most max_length - 1, then eos_id, "
        "padded with pad_id (longer rows are cut to max_length - 1 ids + eos_id in the model)",
        "output": "ids int32 [batch, beam_size, length] and scores float32 [batch, beam_size], best first; "
        "keep the ids before the first eos_id or pad_id, drop start_id and unk_id, detokenize with "
        "SentencePiece (target_tokenizer's model where there is one), collapse double spaces",
        "saved_model_dtype": decoding.runtime.dtype or "float32",
        "saved_model_shortlist": decoding.search.shortlist,
        "model_dirs": [os.path.abspath(path) for path in model_dirs],
        **({"checkpoint": checkpoint} if checkpoint else {}),
    }


def tflite_decoding(decoding: DecodingConfig) -> DecodingConfig:
    """The search the TFLite models run: the SavedModels', in float32, without XLA and without a
    vocabulary shortlist (whose size depends on the batch)."""
    return decoding.replace(dtype=None, jit_compile=False, shortlist=False)


def tflite_models(function, spec: tf.TensorSpec, quantize=(False,), *, custom_ops: bool = False) -> list[bytes]:
    """TFLite models of a one-input `tf.function`, one per `quantize` flag (True: dynamic-range
    int8 weights), as signature `serving_default` with the function's input and output names.

    The weights are frozen into constants first: TFLite reads no resource variable inside a
    WHILE loop (`read_variable.cc ... variable != nullptr` at run time).
    """
    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)

    @functools.partial(graph_function, input_signature=[spec])
    def serving_default(x):
        return tf.nest.pack_sequence_as(concrete.structured_outputs, frozen(x))

    holder = tf.Module()
    holder.serving_default = serving_default
    models = []
    for int8 in quantize:
        converter = tf.lite.TFLiteConverter.from_concrete_functions([serving_default.get_concrete_function()], holder)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.allow_custom_ops = custom_ops
        if int8:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        models.append(converter.convert())
    return models


def traceable(model, decoding: DecodingConfig, modifiers: tuple) -> tuple:
    """`modifiers` (user `kt.Modifier`s), once a beam search with them traces into a graph, or a
    one-line ValueError naming the first that does not (a SavedModel holds graphs only)."""
    for modifier in modifiers:
        search = graph_function(
            lambda source_ids, modifier=modifier: search_beams(model, source_ids, decoding, modifiers=(modifier,)),
            input_signature=[IDS_SPEC],
        )
        try:
            search.get_concrete_function()
        except Exception as error:  # whatever a user's hook raises while traced
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ValueError(
                f"modifier {type(modifier).__name__} cannot be exported (not traceable: {first})"
            ) from None
    return modifiers


def _save_version(module: TranslationModule, path: str, warmup: dict | None = None) -> None:
    """Save to a hidden sibling of `path`, then rename: TF Serving, which watches the base path
    for numbered directories, never sees a half-written version."""
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial")
    module.save(temporary)
    if warmup is not None:
        write_warmup_requests(os.path.join(temporary, "assets.extra", "tf_serving_warmup_requests"), **warmup)
    os.replace(temporary, path)


def export_tensorflow(
    model,
    tokenizer,
    out: str,
    name: str = "translator",
    decoding: DecodingConfig | None = None,
    log=print,
    model_dirs: Sequence[str] = (),
    tflite: bool = True,
    checkpoint: dict | None = None,
    glossary: Glossary | None = None,
    lexical_shortlist=None,
    modifiers=(),
    batching: dict | None = None,
    **overrides,
) -> dict:
    """Write every artifact (see the module docstring) to `out`, decoding with `decoding` and
    `overrides` of its fields (`DecodingConfig`; default the paper's search, §6.1); returns
    {artifact: path}.

    The int8 SavedModel is the text one's with int8 weights, whatever `int8` says (not read: the
    float ones stay float32 or `dtype`). `jit_compile`: the SavedModels' search runs compiled by
    XLA, which TF Serving runs on CPU only with `--xla_cpu_compilation_enabled`; `dtype`: the
    SavedModels compute in it
    (`Transformer.with_dtype`, e.g. "bfloat16"). The TFLite models run the same search in
    float32 (and int8 weights), never with XLA (`tflite_decoding`). `model` may be an `Ensemble`
    (`search/ensemble.py`): every artifact then runs the ensemble's search. `model_dirs`: the
    model directory exported, recorded in translator.json so that `export --check` can compare
    the artifacts' translations with its checkpoint's, `checkpoint` which one (`tflite_metadata`).
    `tflite=False`: no TFLite model (and none left from an earlier export into `out`); the
    returned paths then have no TFLite key. `glossary`: the text SavedModels' `translate` holds
    its terms (`signatures.py`); written to `out`/glossary.tsv and named in translator.json.
    `shortlist`: the SavedModels (float and int8) search over `lexical_shortlist` (a
    `data.shortlist.Shortlist`, the model dir's), saved in them. `modifiers`: the user's
    `kt.Modifier`s, traced into every search of every artifact (a ValueError of one line for one
    that cannot be traced: `traceable`). `batching`: the policy of `exporters.batching.write_batching`
    ({} for `serve`'s defaults, or `max_batch_tokens=`, `batch_timeout_ms=`, ...): its
    batching_parameters.txt and models.config written to OUT/saved_model, which TF Serving mounts
    as /models (keys "batching_parameters" and "models_config")."""
    decoding = (decoding or DecodingConfig()).replace(**overrides).replace(int8=False)
    check_shortlist(decoding, lexical_shortlist)
    shortlist = variables(lexical_shortlist) if decoding.search.shortlist else None
    if glossary is not None:
        glossary.check(tokenizer, model.config.max_length)
    modifiers = traceable(model, decoding, user_modifiers(modifiers))
    suppress_ids = suppressed_ids(tokenizer, decoding.search.suppress_sequences)
    searches = dict(suppress_ids=suppress_ids, modifiers=modifiers)
    served = functools.partial(beam_search, decoding=decoding, lexical_shortlist=shortlist, **searches)
    decode = functools.partial(beam_search, decoding=tflite_decoding(decoding), **searches)
    served_model = model if decoding.runtime.dtype is None else model.with_dtype(decoding.runtime.dtype)
    version = next_version(out, name)
    paths = {
        "saved_model": saved_model_dir(out, name, version),
        "saved_model_ids": ids_saved_model_dir(out, name, version),
        "saved_model_int8": int8_saved_model_dir(out, name, version),
        "tflite": os.path.join(out, TFLITE_MODELS["ids"]),
        "tflite_int8": os.path.join(out, TFLITE_MODELS["ids_int8"]),
        "tflite_text": os.path.join(out, TFLITE_MODELS["text"]),
        "tokenizer": os.path.join(out, "tokenizer.model"),
        "metadata": os.path.join(out, METADATA),
    }
    tflite_keys = ("tflite", "tflite_int8", "tflite_text")
    os.makedirs(out, exist_ok=True)
    log(f"writing the SavedModel {paths['saved_model']}")
    texts = np.array(WARMUP_TEXTS, dtype=object)
    warmup = {"model_name": name, "signature": "serving_default", "inputs": {"text": texts}}
    text = dict(decoding=decoding, glossary=glossary, lexical_shortlist=shortlist, modifiers=modifiers)
    text_module = TranslationModule(served_model, tokenizer, **text)
    _save_version(text_module, paths["saved_model"], warmup)
    log(f"writing the ids-only SavedModel {paths['saved_model_ids']}")
    _save_version(TranslationModule(served_model, decode=served, lexical_shortlist=shortlist), paths["saved_model_ids"])
    log(f"writing the int8 SavedModel {paths['saved_model_int8']}")
    int8_model = TranslationModule(served_model.with_int8(), tokenizer, **text)
    _save_version(int8_model, paths["saved_model_int8"], {**warmup, "model_name": f"{name}{INT8_SUFFIX}"})
    if tflite:
        log("converting to TFLite (builtin ops only) and int8")
        lite_ids = TranslationModule(model, decode=decode).translate_ids
        ids_models = tflite_models(lite_ids, IDS_SPEC, quantize=(False, True))
        log("converting the text TFLite model (tensorflow-text tokenizer op)")
        lite_text = TranslationModule(model, tokenizer, decode, lite_text=True)
        text_model = tflite_models(lite_text.translate_text_to_ids, TEXT_SPEC, custom_ops=True)[0]
        for key, flatbuffer in zip(tflite_keys, (*ids_models, text_model)):
            with open(paths[key], "wb") as f:
                f.write(flatbuffer)
    else:
        for key in tflite_keys:
            path = paths.pop(key)
            if os.path.isfile(path):  # an earlier export's: not of the version just written
                log(f"removing the earlier export's {path}")
                os.remove(path)
    paths.update(tokenizer.save(paths["tokenizer"]))
    two = "target_tokenizer" in paths
    with open(paths["metadata"], "w", encoding="utf-8") as f:
        metadata = tflite_metadata(model.config, decoding, model_dirs, tokenizer.lang_ids, tflite, checkpoint, two)
        if tokenizer.byte_fallback:
            metadata["byte_fallback"] = BYTE_FALLBACK
            if tflite:
                log(f"note: {BYTE_FALLBACK}")
        if glossary is not None:
            paths["glossary"] = os.path.join(out, GLOSSARY)
            glossary.save(paths["glossary"])
            metadata["glossary"] = {"path": GLOSSARY, "case_sensitive": glossary.case_sensitive}
        json.dump(metadata, f, indent=2)
        f.write("\n")
    if batching is not None:
        names = [name, f"{name}_ids", f"{name}{INT8_SUFFIX}"]
        written = write_batching(os.path.join(out, "saved_model"), names, **batching)
        paths["batching_parameters"], paths["models_config"] = written["parameters"], written["config"]
        log(f"TF Serving with batching: {written['command']}")
    return paths
