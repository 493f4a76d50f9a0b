"""The contract every layer of the package keeps (shared by all layer tests)."""

import json

import keras
import numpy as np


def run_layer_test(
    layer_cls, init_kwargs, inputs, call_kwargs=None, expected_output_shape=None, expected_trainable_weights=None
):
    """Config and JSON round trips, eager and symbolic calls, weight count, one `fit` step, and
    a rebuilt layer with the same weights giving the same output.

    `inputs` is a tuple of float arrays passed positionally; `call_kwargs` are extra call arguments.
    """
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    output = layer(*inputs, **call_kwargs)
    output = output[0] if isinstance(output, tuple) else output
    if expected_output_shape is not None:
        assert tuple(output.shape) == tuple(expected_output_shape)
    if expected_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_trainable_weights

    # Config round trip: every constructor argument comes back.
    config = layer.get_config()
    for name, value in init_kwargs.items():
        assert config[name] == value, name
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config

    # JSON round trip through Keras' registry.
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(layer)))
    revived = keras.saving.deserialize_keras_object(serialized)
    assert type(revived) is layer_cls and revived.get_config() == config

    # Same weights, same output (eager).
    revived(*inputs, **call_kwargs)
    revived.set_weights(layer.get_weights())
    revived_output = revived(*inputs, **call_kwargs)
    revived_output = revived_output[0] if isinstance(revived_output, tuple) else revived_output
    np.testing.assert_allclose(np.asarray(revived_output), np.asarray(output), atol=1e-6)

    # Symbolic call: the layer works in a functional model and trains one step.
    symbolic_inputs = [keras.Input(shape=np.shape(x)[1:], dtype="float32") for x in inputs]
    fresh = layer_cls(**init_kwargs)
    symbolic_output = fresh(*symbolic_inputs, **call_kwargs)
    symbolic_output = symbolic_output[0] if isinstance(symbolic_output, tuple) else symbolic_output
    assert tuple(symbolic_output.shape[1:]) == tuple(output.shape[1:])
    model = keras.Model(symbolic_inputs, symbolic_output)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [np.array(w) for w in fresh.trainable_weights]
    target = np.random.default_rng(0).normal(size=output.shape).astype("float32")
    history = model.fit(list(inputs), target, epochs=1, batch_size=len(inputs[0]), verbose=0)
    assert np.isfinite(history.history["loss"][0])
    if before:
        assert any(not np.allclose(b, np.array(w)) for b, w in zip(before, fresh.trainable_weights))
    return layer
