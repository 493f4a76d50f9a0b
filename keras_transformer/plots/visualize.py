"""What the notebooks plot: attention heat maps (Vaswani et al., 2017, §3.2, Figures 3-5), the
maximum path lengths of Table 1, and training curves read back from a model directory.

No layer code here: attention weights come from `Transformer.attention_weights`, curves from
the TensorBoard logs that `training.train` writes. matplotlib is imported only by the plotting
functions, so the package does not depend on it (`pip install "keras-aiayn[notebooks]"`).
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os

import numpy as np

from keras_transformer.special_tokens import EOS_ID, PAD_ID, PIECES, START_ID

KINDS = ("encoder", "decoder_self", "decoder_cross")
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder masked self-attention",
    "decoder_cross": "decoder-encoder (cross) attention",
}


def _pyplot():
    """matplotlib.pyplot, or an ImportError that says which extra installs it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the plots need matplotlib: pip install 'keras-aiayn[notebooks]'") from None
    return plt


def token_pieces(tokenizer, ids) -> list[str]:
    """The subword piece of every id, for axis labels (reserved ids as <pad>, <s>, </s>, <unk>)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    return [PIECES.get(int(i), None) or processor.id_to_piece(int(i)) for i in ids]


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """Every head's attention weights for one sentence pair, batch axis removed.

    `weights[kind]` is a list over layers of float arrays [h, queries, keys]: "encoder" [h, S, S],
    "decoder_self" [h, T, T], "decoder_cross" [h, T, S]. Rows sum to 1 over the keys.
    `source_tokens` label S (the source pieces and </s>); `target_tokens` label T (<s> and the
    target pieces: the decoder input, the target shifted right).
    """

    source_tokens: list[str]
    target_tokens: list[str]
    weights: dict[str, list[np.ndarray]]

    def queries_and_keys(self, kind: str) -> tuple[list[str], list[str]]:
        """Axis labels (rows, columns) of a kind of attention."""
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        if kind == "decoder_self":
            return self.target_tokens, self.target_tokens
        if kind == "decoder_cross":
            return self.target_tokens, self.source_tokens
        raise ValueError(f"unknown attention kind {kind!r}; choose one of {', '.join(KINDS)}")


def attention_maps(model, tokenizer, source: str, target: str | None = None) -> AttentionMaps:
    """The attention weights of `model` on one sentence pair, in inference mode.

    Without `target`, the model's own greedy translation of `source` is the target, so the
    maps show what the model attended to while producing it.
    """
    from keras_transformer.search.decoding import greedy_search

    config = model.config
    source_ids = tokenizer.source_ids([source], config.max_length)[0].numpy()[0]  # [S]: one text, no padding
    if target is None:
        hypothesis = greedy_search(model, source_ids[None]).ids.numpy()[0, 0]  # [L], EOS then pad
        ends = np.flatnonzero(hypothesis == EOS_ID)
        target_ids = hypothesis[: ends[0]] if len(ends) else hypothesis[hypothesis != PAD_ID]
    else:
        target_ids = tokenizer.tokenize([target]).numpy()[0]
    target_in_ids = np.concatenate([[START_ID], target_ids])[: config.max_length].astype(np.int32)  # [T]
    weights = model.attention_weights(source_ids[None], target_in_ids[None])
    return AttentionMaps(
        source_tokens=token_pieces(tokenizer, source_ids),
        target_tokens=token_pieces(tokenizer, target_in_ids),
        weights={kind: [np.asarray(layer)[0] for layer in weights[kind]] for kind in KINDS},
    )


def head_statistics(maps: AttentionMaps, kind: str) -> list[dict]:
    """One row per (layer, head): how spread out the head's attention is and where it looks.

    entropy_bits: mean over queries of the entropy of the weights (0 = one key only;
    log2(keys) = uniform). offset: the mean of (key position - query position) under the
    weights (-1 = the previous token, 0 = itself). diagonal: the mean weight on key = query.
    top_key: the key token that receives the most weight summed over queries.
    """
    _, keys = maps.queries_and_keys(kind)
    rows = []
    for layer, heads in enumerate(maps.weights[kind]):
        h, queries, num_keys = heads.shape
        offsets = np.arange(num_keys)[None, :] - np.arange(queries)[:, None]  # [T, S]
        for head in range(h):
            w = heads[head]  # [queries, keys]
            entropy = -(w * np.log2(np.clip(w, 1e-12, None))).sum(axis=-1).mean()
            diagonal = np.mean([w[i, i] for i in range(min(queries, num_keys))])
            rows.append(
                {
                    "layer": layer + 1,
                    "head": head + 1,
                    "entropy_bits": round(float(entropy), 2),
                    "offset": round(float((w * offsets).sum(axis=-1).mean()), 2),
                    "diagonal": round(float(diagonal), 2),
                    "top_key": keys[int(w.sum(axis=0).argmax())],
                }
            )
    return rows


def plot_attention(maps: AttentionMaps, kind: str, layers=None, inches_per_token: float = 0.15):
    """Heat maps of every head of `kind` ("encoder", "decoder_self" or "decoder_cross"): one row
    per layer, one column per head; rows of a map are queries, columns keys. Returns the figure."""
    plt = _pyplot()

    queries, keys = maps.queries_and_keys(kind)
    all_layers = maps.weights[kind]
    layers = list(range(len(all_layers))) if layers is None else list(layers)
    heads = all_layers[0].shape[0]
    width = max(1.5, inches_per_token * len(keys)) + 0.8  # one panel, with room for the query labels
    height = max(1.5, inches_per_token * len(queries)) + 1.0  # with room for the key labels and title
    figure, axes = plt.subplots(len(layers), heads, figsize=(width * heads, height * len(layers)), squeeze=False)
    for row, layer in enumerate(layers):
        for head in range(heads):
            ax = axes[row, head]
            ax.imshow(
                all_layers[layer][head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
            ax.set_yticks(range(len(queries)), queries, fontsize=7)
    figure.suptitle(f"{KIND_TITLES[kind]}: rows = queries, columns = keys", fontsize=11)
    figure.subplots_adjust(
        left=0.8 / (width * heads),
        right=0.99,
        bottom=0.9 / (height * len(layers)),
        top=1 - 0.8 / (height * len(layers)),
        wspace=0.3,
        hspace=0.45,
    )
    return figure


def max_path_lengths(n: int, kernel_size: int = 3, neighbourhood: int = 4) -> dict[str, float]:
    """Maximum path length between any two of `n` positions, per layer type (Table 1 of the paper):
    self-attention O(1), recurrent O(n), convolutional O(log_k(n)) (dilated convolutions),
    self-attention restricted to a neighbourhood of size r O(n / r)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return {
        "self-attention": 1.0,
        "recurrent": float(n - 1) if n > 1 else 0.0,
        f"convolutional (k={kernel_size})": float(max(1, math.ceil(math.log(n, kernel_size)))) if n > 1 else 0.0,
        f"restricted self-attention (r={neighbourhood})": float(math.ceil((n - 1) / neighbourhood)) if n > 1 else 0.0,
    }


def plot_path_lengths(max_n: int = 100, kernel_size: int = 3, neighbourhood: int = 4):
    """The maximum path lengths of `max_path_lengths` for n = 2..max_n. Returns the figure."""
    plt = _pyplot()

    ns = np.arange(2, max_n + 1)
    curves: dict[str, list[float]] = {}
    for n in ns:
        for name, value in max_path_lengths(int(n), kernel_size, neighbourhood).items():
            curves.setdefault(name, []).append(value)
    figure, ax = plt.subplots(figsize=(6, 4), layout="tight")
    for name, values in curves.items():
        ax.plot(ns, values, label=name)
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("maximum path length (layers or steps)")
    ax.set_title("Table 1 of Vaswani et al. (2017): maximum path length")
    ax.legend()
    return figure


def training_curves(model_dir: str) -> dict[str, tuple[list[int], list[float]]]:
    """Loss and accuracy against optimizer steps, read from the TensorBoard logs of a model dir:
    {"loss": (steps, values), "accuracy": ..., "val_loss": ..., "val_accuracy": ...}.

    Training values are epoch means, placed at the step that ended the epoch; validation values
    are logged by Keras at their step. Covers every run of the model dir (resumes included).
    """
    import json

    import tensorflow as tf

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        training = json.load(f)["training"]
    steps_per_epoch, max_steps = training["steps_per_epoch"], training["max_steps"]
    series: dict[str, dict[int, float]] = {}
    wanted = {
        "train": {"epoch_loss": "loss", "epoch_accuracy": "accuracy"},
        "validation": {
            "evaluation_loss_vs_iterations": "val_loss",
            "evaluation_accuracy_vs_iterations": "val_accuracy",
        },
    }
    for split, tags in wanted.items():
        for path in sorted(glob.glob(os.path.join(model_dir, "logs", split, "events.out.tfevents.*"))):
            for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
                event = tf.compat.v1.Event.FromString(record)
                for value in event.summary.value:
                    if value.tag in tags:
                        number = (
                            float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                        )
                        step = min((event.step + 1) * steps_per_epoch, max_steps) if split == "train" else event.step
                        series.setdefault(tags[value.tag], {})[int(step)] = number
    return {name: (sorted(points), [points[s] for s in sorted(points)]) for name, points in series.items()}


def plot_training_curves(model_dir: str):
    """Training and validation loss and accuracy of a model dir against steps. Returns the figure."""
    plt = _pyplot()

    curves = training_curves(model_dir)
    if not curves:
        raise ValueError(f"{model_dir} has no training logs yet (train first)")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, metric in zip(axes, ("loss", "accuracy")):
        for name, label in ((metric, "training"), (f"val_{metric}", "validation")):
            if name in curves:
                steps, values = curves[name]
                ax.plot(steps, values, marker="o", label=label)
        ax.set_xlabel("step")
        ax.set_ylabel("label-smoothed cross-entropy" if metric == "loss" else "token accuracy")
        if ax.lines:
            ax.legend()
    return figure
