"""What Keras 3.15 needs to train a model right under every `tf.distribute` strategy.

`Model` is a `keras.Model` with these fixes, which `Transformer` inherits, so that
`model.fit` trains and logs the same on one device, on several (uneven batches included) and
on several hosts. They touch private Keras methods, so keras is pinned (pyproject.toml); drop
each one when the upstream issue it cites is fixed in the pinned version.

- The symbolic build before the first step: Keras builds from `strategy.reduce("MEAN", batch)`
  of the first distributed batch (keras-team/keras#20329). That collective fails under
  `MultiWorkerMirroredStrategy` (a nested batch of integer ids), and under `MirroredStrategy`
  whenever the first batch splits unevenly over the replicas ("Inputs to operation AddN ...
  must have the same size and shape. Input 0: [3,8] != input 1: [2,8]"). Only shapes matter
  there: `Model` builds from the first replica's part.
- The loss log: Keras weights each replica's loss by its number of sequences, which is wrong
  for a loss already normalised over the global batch (`losses.LabelSmoothedCrossEntropy`)
  when a batch splits unevenly (3 + 2 sequences): the logged loss then differs from one
  device's (no upstream issue: Keras' weighting suits losses that are per-replica means).
  `ReplicaShareMean` counts each replica as 1 / num_replicas of a step (and a step whose
  global batch is empty, which Keras runs at the end of a finite dataset, as none: counted
  as a step of loss 0, it pulled `evaluate`'s and the validation loss down by one step in
  n + 1); `Model.compile` installs it, and `Model.compile_from_config` compiles a loaded
  model all the same (Keras skips that for a class that overrides `compile`).
- The logs of a multi-worker step: Keras reduces them with `strategy.reduce("MEAN", v, axis=0)`,
  which fails on scalars ("Invalid reduction dimension 0 for input with 0 dimensions";
  tensorflow/tensorflow#72388, the family of keras-team/keras#20329): `Model` gives it
  [1]-vectors.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras.src.utils import tracking


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` spans several workers (hosts or processes)."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and strategy.extended._in_multi_worker_mode()


class ReplicaShareMean(keras.metrics.Mean):
    """The mean training loss per step, for losses that are already global on every replica.

    Each replica's loss is its share of the global per-token mean, so each counts
    1 / num_replicas of a step, however many sequences it holds. With a loss that is a mean
    over each replica's own sequences, the logged value is the mean of the replicas' means.
    """

    def update_state(self, values, sample_weight=None):
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        # Keras passes this replica's number of sequences. A step of the whole batch counts only
        # if the global batch has any: Keras ends a finite dataset with one empty step.
        sequences = tf.cast(1 if sample_weight is None else sample_weight, self.dtype)
        context = tf.distribute.get_replica_context()
        if context is not None:
            sequences = context.all_reduce(tf.distribute.ReduceOp.SUM, sequences)
        super().update_state(values, sample_weight=tf.where(sequences > 0, 1.0 / replicas, 0.0))


class Model(keras.Model):
    """`keras.Model` with the Keras 3.15 fixes of this module's docstring."""

    @tracking.no_automatic_dependency_tracking  # as Keras' own `compile`: a built model may compile
    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        self._loss_tracker = ReplicaShareMean(name="loss")

    def compile_from_config(self, config):
        # Keras does not compile a loaded model whose class overrides `compile`; this `compile`
        # only swaps the loss tracker, so compile as Keras would.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # keras-team/keras#20329: build from the first replica's part of the first batch, not
        # from a collective MEAN over the replicas' parts (which need not have one shape).
        if iterator is not None and self._distribute_strategy is not None:  # None: Keras builds later
            local_results = self.distribute_strategy.experimental_local_results
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(lambda value: local_results(value)[0], next(batches))
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def _as_vectors(self, logs):
        if is_multi_worker(self.distribute_strategy):  # tensorflow/tensorflow#72388
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def train_step(self, data):
        return self._as_vectors(super().train_step(data))

    def test_step(self, data):
        return self._as_vectors(super().test_step(data))


def also_loads(*registered_names: str):
    """Class decorator: register the class under names it had before (`package>Name`) as well,
    so `.keras` files saved under those names load as this class."""

    def register(cls):
        for name in registered_names:
            keras.saving.get_custom_objects()[name] = cls
        return cls

    return register
