"""Label-smoothed cross-entropy over non-pad target tokens (Vaswani et al., 2017, §5.4).

Label smoothing (Szegedy et al., 2016) trains against q = (1 - eps) * onehot(y) + eps / V.
Its cross-entropy with p = softmax(z) needs one log-sum-exp over the vocabulary:

    -sum_v q_v log p_v = logsumexp(z) - sum_v q_v z_v
                       = logsumexp(z) - (1 - eps) z_y - (eps / V) sum_v z_v

Other backends compute the second line with `keras.ops`. On TensorFlow the fused
`softmax_cross_entropy_with_logits` computes the first, and its gradient softmax(z) - q, in one
kernel: composing it from `logsumexp`, `take_along_axis` and a sum cost TensorFlow ~12% of a
training step at the medium workload: the gradient of `take_along_axis` scatters through an
UnsortedSegmentSum over all B x T x V logits, and that of `logsumexp` tiles them
(`python bench/profiles.py step`: bench/RESULTS.md, "Where the training step goes").
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.special_tokens import PAD_ID


def global_token_count(mask):
    """Non-pad tokens in the whole global batch. Under tf.distribute each replica sees its own
    part, so the count is summed over replicas; Keras' JAX distribution (and one device anywhere)
    computes on the global batch already."""
    count = ops.sum(ops.cast(mask, "float32"))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replica = tf.distribute.get_replica_context()
        if replica is not None and replica.num_replicas_in_sync > 1:
            count = replica.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return count


def smoothed_cross_entropy(labels, logits, eps: float):
    """-sum_v q_v log softmax(z)_v for labels [B, T] int32 and logits [B, T, V] float32 -> [B, T]."""
    vocab = ops.shape(logits)[-1]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        off_value = eps / ops.cast(vocab, "float32")  # eps / V
        smoothed = tf.one_hot(labels, vocab, on_value=1.0 - eps + off_value, off_value=off_value)  # q, [B, T, V]
        return tf.nn.softmax_cross_entropy_with_logits(labels=smoothed, logits=logits)  # [B, T]
    true_logits = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(labels, -1), axis=-1), -1)  # z_y, [B, T]
    mean_logits = ops.mean(logits, axis=-1)  # (1 / V) sum_v z_v, [B, T]
    return ops.logsumexp(logits, axis=-1) - (1.0 - eps) * true_logits - eps * mean_logits  # [B, T]


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed cross-entropy per non-pad target token.

    `y_true` [B, T] token ids, `y_pred` [B, T, V] logits. The sum over this replica's tokens is
    divided by the non-pad token count of the global batch, so the gradients that tf.distribute
    sums over replicas are those of the global per-token mean, whatever the split.
    """

    def __init__(
        self, label_smoothing: float = 0.1, pad_id: int = PAD_ID, name="label_smoothed_cross_entropy", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        logits = ops.cast(y_pred, "float32")  # [B, T, V]
        labels = ops.cast(y_true, "int32")  # [B, T]
        losses = smoothed_cross_entropy(labels, logits, self.label_smoothing)  # [B, T]
        mask = ops.not_equal(labels, self.pad_id)  # [B, T]
        total = ops.sum(ops.where(mask, losses, 0.0))
        return total / ops.maximum(global_token_count(mask), 1.0)  # a scalar: Keras reduces no further

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}
