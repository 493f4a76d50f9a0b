"""Training metrics: the accuracy of the next-token predictions on non-pad target tokens, and the
mean loss per step."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.special_tokens import PAD_ID


def predicted_ids(logits):
    """The arg-max token of logits [B, T, V] -> [B, T] int32."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # tf.argmax, not ops.argmax: Keras' TensorFlow argmax first rewrites -0.0 in all B x T x V
        # logits (four extra passes, ~5% of a medium-workload training step; `bench/profiles.py step`).
        return tf.argmax(logits, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(logits, axis=-1), "int32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-pad target tokens whose arg-max prediction is right."""

    def __init__(self, pad_id: int = PAD_ID, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.cast(y_true, "int32")  # [B, T]
        mask = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        hits = ops.cast(ops.equal(predicted_ids(y_pred), labels), "float32")  # [B, T]
        self.correct.assign_add(ops.sum(hits * mask))
        self.total.assign_add(ops.sum(mask))

    def result(self):
        return ops.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


class StepMean(keras.metrics.Mean):
    """The mean loss per step, each step counting once whatever its number of sequences.

    Keras' own loss tracker weights a step by its number of sequences, which suits a loss that is
    a mean over sequences; the label-smoothed loss is already a mean over the batch's non-pad
    tokens (`losses.LabelSmoothedCrossEntropy`), so the logged loss is the mean of the steps'
    losses, as TensorFlow's tracker (`keras_compat.ReplicaShareMean`) logs it on one device.
    """

    def update_state(self, values, sample_weight=None):
        super().update_state(values)
