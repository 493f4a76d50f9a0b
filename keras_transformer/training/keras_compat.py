"""What Keras 3.15 needs to train a model right under every `tf.distribute` strategy.

`fit_under_tf_distribute(model)` applies these fixes to one compiled model (`compile_model`
does), so that `model.fit` trains and logs the same on one device, on several (uneven batches
included) and on several hosts; the model class itself stays backend-neutral. They touch
private Keras methods of its TensorFlow trainer, so keras is pinned (pyproject.toml); drop each
one when the upstream issue it cites is fixed in the pinned version.

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
  n + 1). A model compiled again (or loaded from a `.keras` file and compiled by Keras) gets
  Keras' own tracker back until `fit_under_tf_distribute` is applied again.
- The logs of a multi-worker step: Keras reduces them with `strategy.reduce("MEAN", v, axis=0)`,
  which fails on scalars ("Invalid reduction dimension 0 for input with 0 dimensions";
  tensorflow/tensorflow#72388, the family of keras-team/keras#20329): the step's logs become
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


def fit_under_tf_distribute(model: keras.Model) -> keras.Model:
    """Apply this module's fixes to the compiled `model` (on the TensorFlow backend), in place:
    its loss tracker, the symbolic build before the first step, and the logs of its train and
    test steps. Returns `model`."""
    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"these fixes are for Keras' TensorFlow trainer, not the {keras.backend.backend()} backend")
    with tracking.DotNotTrackScope():  # as Keras' own `compile` sets it: a built model may be compiled
        model._loss_tracker = ReplicaShareMean(name="loss")
    trainer = type(model)
    build, train_step, test_step = trainer._maybe_symbolic_build, trainer.train_step, trainer.test_step

    def maybe_symbolic_build(iterator=None, data_batch=None):
        # keras-team/keras#20329: build from the first replica's part of the first batch, not
        # from a collective MEAN over the replicas' parts (which need not have one shape).
        if iterator is not None and model._distribute_strategy is not None:  # None: Keras builds later
            local_results = model.distribute_strategy.experimental_local_results
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(lambda value: local_results(value)[0], next(batches))
                break
            iterator = None
        return build(model, iterator=iterator, data_batch=data_batch)

    def as_vectors(logs):
        if is_multi_worker(model.distribute_strategy):  # tensorflow/tensorflow#72388
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    # Instance attributes: Keras calls `self._maybe_symbolic_build`, `self.train_step`, `self.test_step`.
    model._maybe_symbolic_build = maybe_symbolic_build
    model.train_step = lambda data: as_vectors(train_step(model, data))
    model.test_step = lambda data: as_vectors(test_step(model, data))
    return model
