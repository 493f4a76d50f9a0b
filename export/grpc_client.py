"""Translate with TF Serving's gRPC Predict API (pip install tensorflow-serving-api).

    python export/grpc_client.py --host localhost:8500 --model translator "Jesus wept."

`predict_request` builds the PredictRequest; tests run its inputs through the exported signature.
"""

import argparse

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def predict_request(texts, model="translator", signature="serving_default"):
    """A PredictRequest with input `text`: string [batch]."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.array(texts, dtype=object)))
    return request


def translate(texts, host="localhost:8500", model="translator", timeout=30.0):
    """[(translation, score)] from a running model server."""
    with grpc.insecure_channel(host) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(predict_request(texts, model), timeout)
    translations = tf.make_ndarray(response.outputs["translation"])
    scores = tf.make_ndarray(response.outputs["score"])
    return [(t.decode("utf-8"), float(s)) for t, s in zip(translations, scores)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="localhost:8500")
    parser.add_argument("--model", default="translator")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args()
    for translation, score in translate(args.text, args.host, args.model):
        print(f"{score:.3f}\t{translation}")


if __name__ == "__main__":
    main()
