import keras
import numpy as np
import pytest
from conftest import ARCHITECTURE_OPTIONS

from keras_transformer import TrainingConfig, Transformer, TransformerConfig
from keras_transformer.layers import sinusoid_table
from keras_transformer.model_dir import ModelDir
from keras_transformer.special_tokens import START_ID

SOURCE = np.array([[5, 6, 7, 8, 2, 0], [9, 10, 2, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 11, 12, 13], [1, 14, 15, 16]], np.int32)


CONFIGS = {"post_ln": {}, "pre_ln": {"norm_first": True}, "options": ARCHITECTURE_OPTIONS}


def built(**overrides):
    """A built tiny model (vocabulary 50) without dropout; its output bias (if any) random, not 0."""
    model = Transformer(TransformerConfig.tiny(vocab_size=50, dropout=0.0, **overrides))
    model.build()
    if model.embedding.logit_bias is not None:
        model.embedding.logit_bias.assign(np.random.default_rng(3).normal(size=50))
    return model


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request):
    return built(**CONFIGS[request.param])


@pytest.mark.parametrize(
    "preset, expected_millions",
    # the paper: 65M and 213M (Table 3); big's build in `make test-slow` (issue 50 item 10)
    [("base", 63.1), pytest.param("big", 214.2, marks=pytest.mark.slow)],
)
def test_parameter_counts_match_the_paper(preset, expected_millions):
    model = Transformer(TransformerConfig.preset(preset, vocab_size=37000))
    model.build()
    assert model.count_params() / 1e6 == pytest.approx(expected_millions, abs=0.1)


def test_logits_shape_and_dtype(model):
    logits = model((SOURCE, TARGET_IN))
    assert logits.shape == (2, 4, 50) and logits.dtype == "float32"


def test_extra_source_padding_changes_nothing(model):
    padded = np.pad(SOURCE, ((0, 0), (0, 3)))
    np.testing.assert_allclose(model((padded, TARGET_IN)), model((SOURCE, TARGET_IN)), atol=1e-5)


def test_extra_target_padding_changes_nothing(model):
    padded = np.pad(TARGET_IN, ((0, 0), (0, 2)))
    np.testing.assert_allclose(model((SOURCE, padded))[:, :4], model((SOURCE, TARGET_IN)), atol=1e-5)


def test_future_target_tokens_change_nothing(model):
    changed = TARGET_IN.copy()
    changed[:, 2:] = [[30, 31], [32, 33]]
    np.testing.assert_allclose(model((SOURCE, changed))[:, :2], model((SOURCE, TARGET_IN))[:, :2], atol=1e-5)


def test_other_rows_of_the_batch_change_nothing(model):
    alone = model((SOURCE[:1, :5], TARGET_IN[:1]))
    np.testing.assert_allclose(model((SOURCE, TARGET_IN))[:1], alone, atol=1e-5)


def test_keras_round_trip_gives_identical_outputs(model, tmp_path):
    path = tmp_path / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.config == model.config
    np.testing.assert_array_equal(reloaded((SOURCE, TARGET_IN)), model((SOURCE, TARGET_IN)))


@pytest.mark.parametrize("max_length", [None, 6], ids=["growing_cache", "fixed_cache"])
def test_cached_decode_steps_equal_the_full_forward_pass(model, max_length):
    logits = np.asarray(model((SOURCE, TARGET_IN)))
    context, cache = model.start_decoding(SOURCE, hypotheses=1, max_length=max_length)
    for position in range(TARGET_IN.shape[1]):
        step_logits, cache = model.decode_step(TARGET_IN[:, position], position, cache, context)
        np.testing.assert_allclose(step_logits, logits[:, position], atol=1e-4)


def test_hypotheses_of_one_sentence_share_its_context(model):
    """Three hypotheses per sentence (rows b*3 .. b*3+2) attend to their sentence's memory, not
    to a copy: each row's logits equal the full forward pass of its own prefix."""
    logits = np.asarray(model((np.repeat(SOURCE, 3, axis=0), np.repeat(TARGET_IN, 3, axis=0))))
    context, cache = model.start_decoding(SOURCE, hypotheses=3)
    memory, _ = context.rows  # per decoder layer: its cross-attention keys and values
    assert cache[0]["key"].shape[0] == 6 and memory[0][0].shape[0] == 2
    for position in range(TARGET_IN.shape[1]):
        tokens = np.repeat(TARGET_IN[:, position], 3)
        step_logits, cache = model.decode_step(tokens, position, cache, context)
        np.testing.assert_allclose(step_logits, logits[:, position], atol=1e-4)


def test_attention_weights_for_every_layer_and_head(model):
    weights = model.attention_weights(SOURCE, TARGET_IN)
    assert len(weights["encoder"]) == model.config.encoder_depth == len(model.encoder.blocks)
    assert len(weights["decoder_cross"]) == model.config.decoder_depth == len(model.decoder.blocks)
    assert weights["encoder"][0].shape == (2, model.config.num_heads, 6, 6)
    assert weights["decoder_self"][0].shape == (2, model.config.num_heads, 4, 4)
    assert weights["decoder_cross"][-1].shape == (2, model.config.num_heads, 4, 6)
    cross = np.asarray(weights["decoder_cross"][0])
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert np.all(cross[1, :, :, 3:] == 0.0)  # source padding gets no attention
    assert np.all(np.triu(np.asarray(weights["decoder_self"][0])[0, 0], k=1) == 0.0)  # causal


def test_the_embedding_matrix_is_shared(model):
    names = [w.path for w in model.trainable_weights if "embedding" in w.path and len(w.shape) == 2]
    assert len(names) == 1 and names[0].endswith("shared_embedding/embeddings")


def test_a_tensorflow_checkpoint_holds_every_weight(model, tmp_path):
    import tensorflow as tf

    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    saved = {name for name, _ in tf.train.list_variables(path) if name.startswith("model/")}
    assert len(saved) == len(model.weights)  # every layer, also those built in a stack
    fresh = Transformer(model.config)
    fresh.build()
    tf.train.Checkpoint(model=fresh).restore(path).assert_consumed()
    np.testing.assert_array_equal(fresh((SOURCE, TARGET_IN)), model((SOURCE, TARGET_IN)))


def test_with_dtype_copies_the_model_in_bfloat16(model):
    """The copy holds every weight cast to bf16 and computes in bf16; its logits stay float32 and
    near the float32 model's; the original is untouched."""
    copy = model.with_dtype("bfloat16")
    assert copy is not model and copy.config == model.config and model.dtype_policy.name == "float32"
    assert {w.dtype for w in copy.weights} == {"bfloat16"} and {w.dtype for w in model.weights} == {"float32"}
    for cast, original in zip(copy.weights, model.weights):
        np.testing.assert_array_equal(cast.numpy(), original.numpy().astype(cast.numpy().dtype))
    logits, reference = copy((SOURCE, TARGET_IN)), model((SOURCE, TARGET_IN))
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits, reference, atol=0.1)  # bf16 keeps 8 bits of mantissa
    assert model.with_dtype("float32") is model


def test_the_options_are_in_the_built_model():
    model = built(**ARCHITECTURE_OPTIONS)
    assert (len(model.encoder.blocks), len(model.decoder.blocks)) == (3, 1)
    assert {block.feed_forward.activation for block in model.encoder.blocks + model.decoder.blocks} == {"swish"}
    np.testing.assert_array_equal(model.positional_encoding.table, sinusoid_table(128, 64, "tensor2tensor"))
    norms = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 2 * 3 + 3 * 1 and {norm.epsilon for norm in norms} == {1e-5}
    pre_ln = built(norm_first=True, layer_norm_epsilon=1e-3)  # the stacks' closing LayerNorms too
    norms = [layer for layer in pre_ln._flatten_layers() if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 2 * 2 + 3 * 2 + 2 and {norm.epsilon for norm in norms} == {1e-3}


def test_the_output_bias_is_added_to_every_logit():
    model = built(output_bias=True)
    with_bias = np.asarray(model((SOURCE, TARGET_IN)))
    bias = model.embedding.logit_bias.numpy()
    model.embedding.logit_bias.assign(np.zeros(50))
    np.testing.assert_allclose(
        with_bias - np.asarray(model((SOURCE, TARGET_IN))), np.broadcast_to(bias, (2, 4, 50)), atol=1e-5
    )


@pytest.mark.parametrize("zero_start", [False, True], ids=["start_embedding", "zero_start"])
def test_a_zero_start_embedding_ignores_the_start_tokens_row(zero_start):
    """With `start_from_zero_embedding` the decoder's first input is position 0's encoding alone, in
    training (teacher forcing) and in a decoding step alike: the start token's row changes no logit
    but its own (without it, every one)."""
    model = built(start_from_zero_embedding=zero_start)
    before = np.asarray(model((SOURCE, TARGET_IN)))
    context, cache = model.start_decoding(SOURCE, hypotheses=1)
    step_before, _ = model.decode_step(TARGET_IN[:, 0], 0, cache, context)
    table = model.embedding.embeddings.numpy()
    table[START_ID] = np.random.default_rng(4).normal(size=64)
    model.embedding.embeddings.assign(table)
    after = np.asarray(model((SOURCE, TARGET_IN)))
    step_after, _ = model.decode_step(TARGET_IN[:, 0], 0, model.start_decoding(SOURCE, 1)[1], context)
    others = np.arange(50) != START_ID  # the row is also the start token's output projection (tied)
    same = np.array_equal(after[..., others], before[..., others])
    assert same == np.array_equal(np.asarray(step_after)[:, others], np.asarray(step_before)[:, others]) == zero_start
    source_start = SOURCE.copy()
    source_start[:, 0] = START_ID  # a source's ids are embedded as they are: only the decoder's start is zero
    assert not np.array_equal(np.asarray(model((source_start, TARGET_IN))), np.asarray(model((SOURCE, TARGET_IN))))


def test_the_options_round_trip_through_config_json(tokenizer, tmp_path):
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, **ARCHITECTURE_OPTIONS)
    ModelDir(str(tmp_path)).write(config, TrainingConfig(), "fixture", tokenizer)
    assert ModelDir(str(tmp_path)).read()["model"] == config
