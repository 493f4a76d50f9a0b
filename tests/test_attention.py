import keras
import numpy as np
import pytest
from layer_contract import run_layer_test

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers.masking import causal_mask, masked_fill_value

RNG = np.random.default_rng(0)


def test_layer_contract():
    x = RNG.normal(size=(2, 5, 16)).astype("float32")
    memory = RNG.normal(size=(2, 7, 16)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 4},
        (x, memory),
        expected_output_shape=(2, 5, 16),
        expected_trainable_weights=6,  # W^Q, W^K|W^V, W^O and their biases
    )


def test_parity_with_keras_multi_head_attention():
    batch, target, source, d_model, heads = 2, 5, 7, 16, 4
    d_k = d_model // heads
    query = RNG.normal(size=(batch, target, d_model)).astype("float32")
    memory = RNG.normal(size=(batch, source, d_model)).astype("float32")
    mask = RNG.random((batch, target, source)) > 0.3
    mask[..., 0] = True  # every query sees at least one key

    reference = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=d_k)
    expected, expected_scores = reference(query, memory, attention_mask=mask, return_attention_scores=True)
    q_kernel, q_bias, k_kernel, k_bias, v_kernel, v_bias, o_kernel, o_bias = [w.numpy() for w in reference.weights]

    ours = MultiHeadAttention(num_heads=heads)
    ours(query, memory)
    ours.set_weights(
        [
            q_kernel.reshape(d_model, d_model),
            q_bias.reshape(d_model),
            np.concatenate([k_kernel.reshape(d_model, d_model), v_kernel.reshape(d_model, d_model)], axis=1),
            np.concatenate([k_bias.reshape(d_model), v_bias.reshape(d_model)]),
            o_kernel.reshape(d_model, d_model),
            o_bias,
        ]
    )
    output, scores = ours(query, memory, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)


def test_identity_projections_compute_equation_1_by_hand():
    d_model = 4
    layer = MultiHeadAttention(num_heads=1)
    q = RNG.normal(size=(1, 3, d_model)).astype("float32")
    kv = RNG.normal(size=(1, 2, d_model)).astype("float32")
    layer(q, kv)
    eye = np.eye(d_model, dtype="float32")
    layer.set_weights(
        [eye, np.zeros(d_model), np.concatenate([eye, eye], 1), np.zeros(2 * d_model), eye, np.zeros(d_model)]
    )
    logits = q[0] @ kv[0].T / np.sqrt(d_model)  # Eq. 1
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(layer(q, kv)[0], weights @ kv[0], atol=1e-5)


def test_masked_keys_get_zero_weight_and_do_not_change_output():
    layer = MultiHeadAttention(num_heads=2)
    x = RNG.normal(size=(1, 4, 8)).astype("float32")
    mask = np.array([[[True, True, False, False]]])  # keys 2, 3 hidden from every query
    out, scores = layer(x, x, attention_mask=mask, return_attention_scores=True)
    assert np.all(np.asarray(scores)[..., 2:] == 0.0)
    changed = x.copy()
    changed[:, 2:] += 5.0  # only the hidden keys change (queries 0, 1 unchanged)
    out2 = layer(changed, changed, attention_mask=mask)
    np.testing.assert_allclose(np.asarray(out2)[:, :2], np.asarray(out)[:, :2], atol=1e-5)


def test_causal_mask():
    np.testing.assert_array_equal(causal_mask(3)[0], np.tril(np.ones((3, 3), bool)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_mask_fill_value_is_finite_in_the_compute_dtype(dtype):
    import ml_dtypes  # registers bfloat16 with NumPy

    value = masked_fill_value(dtype)
    assert np.isfinite(np.array(value, dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype))
    assert value < -6e4


def test_widths_that_do_not_split_into_heads_are_refused():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(num_heads=3)(np.zeros((1, 2, 8), "float32"), np.zeros((1, 2, 8), "float32"))


def test_a_decoding_steps_projections_reshape_to_shapes_known_when_traced():
    """[B', 1, d] with only B' unknown: every reshape of the projections and heads is to a constant
    shape (-1 for B'), so the step packs no shape at run time; an input of unknown length still
    gets its dynamic shape."""
    import tensorflow as tf

    layer = MultiHeadAttention(num_heads=2)
    layer.build((None, None, 8))

    def traced(shape):
        spec = tf.TensorSpec(shape, tf.float32)
        return tf.function(lambda x: layer.project_key_value(layer.query_dense(x))).get_concrete_function(spec)

    step, dynamic = traced([None, 1, 8]), traced([None, None, 8])
    step_ops, dynamic_ops = ({op.type for op in f.graph.get_operations()} for f in (step, dynamic))
    assert "Reshape" in step_ops and "Pack" not in step_ops and "Pack" in dynamic_ops
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 1, 8)), tf.float32)
    (key, value), (want_key, want_value) = step(x), dynamic(x)
    assert key.shape == value.shape == (3, 2, 1, 4)
    np.testing.assert_array_equal(key.numpy(), want_key.numpy())
    np.testing.assert_array_equal(value.numpy(), want_value.numpy())
