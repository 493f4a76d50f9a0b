"""`keras-transformer export`: every deployment artifact of a trained model, from one command.

    OUT/saved_model/<name>/1/        serving_default (text -> translation, score), translate_ids,
                                     translate_nbest; needs tensorflow-text's ops (TF Serving
                                     links them); assets.extra/tf_serving_warmup_requests
    OUT/saved_model/<name>_ids/1/    serving_default = translate_ids; TensorFlow ops only
    OUT/translator.tflite            source_ids -> ids, scores; TFLite builtin ops only
    OUT/translator_int8.tflite       the same with dynamic-range quantized (int8) weights
    OUT/translator_text.tflite       text -> ids, scores; builtins + tensorflow-text's
                                     FastSentencepieceTokenize custom op
    OUT/tokenizer.model              the SentencePiece model, to detokenize TFLite outputs

The TFLite models take any batch and length: resize the input tensor, then allocate.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from keras_transformer.decoding import paper_beam_search
from keras_transformer.serving import IDS_SPEC, TEXT_SPEC, Decode, TranslationModule

VERSION = "1"  # TF Serving loads the highest numbered version directory
WARMUP_TEXTS = ("In the beginning God created the heavens and the earth.", "Jesus wept.")


def saved_model_dir(out: str, name: str) -> str:
    return os.path.join(out, "saved_model", name, VERSION)


def ids_saved_model_dir(out: str, name: str) -> str:
    return os.path.join(out, "saved_model", f"{name}_ids", VERSION)


def write_warmup_requests(path: str, model_name: str, signature: str, inputs: dict) -> None:
    """TF Serving's warmup file: PredictionLog records that the server replays before serving
    (`assets.extra/tf_serving_warmup_requests`), so the first user request pays no tracing."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(log.SerializeToString())


def tflite_models(function, spec: tf.TensorSpec, quantize=(False,), *, custom_ops: bool = False) -> list[bytes]:
    """TFLite models of a one-input `tf.function`, one per `quantize` flag (True: dynamic-range
    int8 weights), as signature `serving_default` with the function's input and output names.

    The weights are frozen into constants first: TFLite reads no resource variable inside a
    WHILE loop (`read_variable.cc ... variable != nullptr` at run time).
    """
    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)

    @tf.function(input_signature=[spec])
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


def export(model, tokenizer, out: str, name: str = "translator", decode: Decode = paper_beam_search, log=print) -> dict:
    """Write every artifact (see the module docstring) to `out`; returns {artifact: path}."""
    paths = {
        "saved_model": saved_model_dir(out, name),
        "saved_model_ids": ids_saved_model_dir(out, name),
        "tflite": os.path.join(out, "translator.tflite"),
        "tflite_int8": os.path.join(out, "translator_int8.tflite"),
        "tflite_text": os.path.join(out, "translator_text.tflite"),
        "tokenizer": os.path.join(out, "tokenizer.model"),
    }
    os.makedirs(out, exist_ok=True)
    log(f"writing the SavedModel {paths['saved_model']}")
    TranslationModule(model, tokenizer, decode).save(paths["saved_model"])
    write_warmup_requests(
        os.path.join(paths["saved_model"], "assets.extra", "tf_serving_warmup_requests"),
        name,
        "serving_default",
        {"text": np.array(WARMUP_TEXTS, dtype=object)},
    )
    log(f"writing the ids-only SavedModel {paths['saved_model_ids']}")
    ids_only = TranslationModule(model, decode=decode)
    ids_only.save(paths["saved_model_ids"])
    log("converting to TFLite (builtin ops only) and int8")
    ids_models = tflite_models(ids_only.translate_ids, IDS_SPEC, quantize=(False, True))
    log("converting the text TFLite model (tensorflow-text tokenizer op)")
    lite_text = TranslationModule(model, tokenizer, decode, lite_text=True)
    text_model = tflite_models(lite_text.translate_text_to_ids, TEXT_SPEC, custom_ops=True)[0]
    for key, flatbuffer in zip(("tflite", "tflite_int8", "tflite_text"), (*ids_models, text_model)):
        with open(paths[key], "wb") as f:
            f.write(flatbuffer)
    tokenizer.save(paths["tokenizer"])
    return paths
