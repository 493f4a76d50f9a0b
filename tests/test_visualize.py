"""The notebooks' plotting helpers: attention maps of a (random) tiny model, Table 1's path
lengths, and training curves read back from TensorBoard logs."""

import json

import matplotlib
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.plots import visualize

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def model(tokenizer):
    model = kt.Transformer(kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, dropout=0.0))
    model.build()
    return model


def test_attention_maps_shapes_labels_and_masks(model, tokenizer):
    maps = visualize.attention_maps(model, tokenizer, "And God said", target="Und Gott sprach")
    source, target = maps.source_tokens, maps.target_tokens
    assert source[-1] == "</s>" and target[0] == "<s>"
    assert len(source) == len(tokenizer.tokenize(["And God said"]).numpy()[0]) + 1
    h, layers = model.config.num_heads, model.config.num_layers
    for kind, shape in (
        ("encoder", (h, len(source), len(source))),
        ("decoder_self", (h, len(target), len(target))),
        ("decoder_cross", (h, len(target), len(source))),
    ):
        assert len(maps.weights[kind]) == layers
        for weights in maps.weights[kind]:
            assert weights.shape == shape
            np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    for weights in maps.weights["decoder_self"]:  # masked: no query sees a later position
        assert np.all(np.triu(weights, k=1) == 0.0)
        seen = np.tril(np.ones(weights.shape[1:], bool))  # [T, T]: key <= query
        assert np.all(weights[:, seen] > 0.0)


def test_attention_maps_without_target_use_the_greedy_translation(model, tokenizer):
    maps = visualize.attention_maps(model, tokenizer, "Jesus wept.")
    assert maps.target_tokens[0] == "<s>" and "</s>" not in maps.target_tokens
    assert maps.weights["decoder_cross"][0].shape[1:] == (len(maps.target_tokens), len(maps.source_tokens))


def test_head_statistics_on_known_weights():
    identity = np.eye(3)[None]  # one head that attends to itself
    previous = np.array([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]]])  # one head that looks one back
    maps = visualize.AttentionMaps(["a", "b", "c"], ["a", "b", "c"], {"encoder": [identity, previous]})
    first, second = visualize.head_statistics(maps, "encoder")
    assert first == {"layer": 1, "head": 1, "entropy_bits": 0.0, "offset": 0.0, "diagonal": 1.0, "top_key": "a"}
    assert second["offset"] == round(-2 / 3, 2) and second["diagonal"] == round(1 / 3, 2) and second["top_key"] == "a"
    with pytest.raises(ValueError, match="unknown attention kind 'cross'"):
        maps.queries_and_keys("cross")


def test_plot_attention_draws_one_panel_per_layer_and_head(model, tokenizer):
    maps = visualize.attention_maps(model, tokenizer, "And God said", target="Und Gott sprach")
    figure = visualize.plot_attention(maps, "decoder_cross")
    assert len(figure.axes) == model.config.num_layers * model.config.num_heads
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == maps.source_tokens
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == maps.target_tokens
    assert len(visualize.plot_attention(maps, "encoder", layers=[1]).axes) == model.config.num_heads


def test_max_path_lengths_follow_table_1():
    assert visualize.max_path_lengths(9, kernel_size=3, neighbourhood=4) == {
        "self-attention": 1.0,
        "recurrent": 8.0,
        "convolutional (k=3)": 2.0,
        "restricted self-attention (r=4)": 2.0,
    }
    assert visualize.max_path_lengths(100)["recurrent"] == 99.0
    with pytest.raises(ValueError, match="n must be >= 1"):
        visualize.max_path_lengths(0)
    assert len(visualize.plot_path_lengths(20).axes[0].lines) == 4


def test_training_curves_read_the_tensorboard_logs(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"training": {"steps_per_epoch": 10, "max_steps": 25}}))
    with tf.summary.create_file_writer(str(tmp_path / "logs" / "train")).as_default():
        for epoch, loss in enumerate([5.0, 4.0, 3.5]):
            tf.summary.scalar("epoch_loss", loss, step=epoch)
    with tf.summary.create_file_writer(str(tmp_path / "logs" / "validation")).as_default():
        for step, loss in ((10, 4.5), (20, 4.2), (25, 4.1)):
            tf.summary.scalar("evaluation_loss_vs_iterations", loss, step=step)
    curves = visualize.training_curves(str(tmp_path))
    assert curves["loss"] == ([10, 20, 25], [5.0, 4.0, 3.5])  # the last epoch ends at max_steps
    assert curves["val_loss"][0] == [10, 20, 25]
    np.testing.assert_allclose(curves["val_loss"][1], [4.5, 4.2, 4.1])
    assert len(visualize.plot_training_curves(str(tmp_path)).axes[0].lines) == 2
