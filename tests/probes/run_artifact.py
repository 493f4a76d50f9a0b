"""Run an exported artifact in a fresh process that imports no code of keras_transformer.

    python run_artifact.py KIND PATH < pickle(list of (signature, {input: array})) > pickle(list of {output: array})

KIND: `saved_model` (tf.saved_model.load, then call the signature), `session` (the way TF
Serving loads: tf.compat.v1 loader + Session.run with the signature's tensor names),
`litert` (ai_edge_litert only: no TensorFlow), `litert_text` (LiteRT with tensorflow-text's
TFLite kernels). Reports the modules it imported in the first result under "__modules__".
"""

import pickle
import sys


def saved_model(path, calls):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the SavedModel has tensorflow-text ops

    loaded = tf.saved_model.load(path)
    return [
        {k: v.numpy() for k, v in loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()}).items()}
        for name, inputs in calls
    ]


def session(path, calls):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    results = []
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        meta_graph = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        for name, inputs in calls:
            signature = meta_graph.signature_def[name]
            feed = {signature.inputs[k].name: v for k, v in inputs.items()}
            fetch = {k: info.name for k, info in signature.outputs.items()}
            results.append(sess.run(fetch, feed_dict=feed))
    return results


def litert(path, calls, registerers=None):
    from ai_edge_litert.interpreter import Interpreter, InterpreterWithCustomOps

    if registerers is None:
        interpreter = Interpreter(model_path=path)
    else:
        interpreter = InterpreterWithCustomOps(model_path=path, custom_op_registerers=registerers)
    results = []
    for name, inputs in calls:
        runner = interpreter.get_signature_runner(name)  # resizes the inputs to each call's shape
        results.append(runner(**inputs))
    return results


def litert_text(path, calls):
    import tensorflow_text

    return litert(path, calls, tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)


def main():
    kind, path = sys.argv[1], sys.argv[2]
    calls = pickle.load(sys.stdin.buffer)
    results = {"saved_model": saved_model, "session": session, "litert": litert, "litert_text": litert_text}[kind](
        path, calls
    )
    if results:
        results[0]["__modules__"] = sorted(name for name in sys.modules if "." not in name)
    pickle.dump(results, sys.stdout.buffer)


if __name__ == "__main__":
    main()
