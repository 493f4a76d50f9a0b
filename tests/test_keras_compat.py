"""The Keras 3.15 fixes every `Transformer` carries (their training parity under MirroredStrategy
is in test_distribute.py), and `.keras` files saved under the model class's earlier name."""

import json
import warnings
import zipfile

import keras
import numpy as np
import pytest

from keras_transformer import TrainingConfig, Transformer, TransformerConfig
from keras_transformer.training.keras_compat import ReplicaShareMean, fit_under_tf_distribute
from keras_transformer.training.optimization import compile_model

SOURCE = np.array([[5, 6, 7, 2], [9, 10, 2, 0]], np.int32)
TARGET_IN = np.array([[1, 11, 12], [1, 14, 0]], np.int32)


def test_a_compiled_transformer_logs_the_loss_per_step():
    model = compile_model(Transformer(TransformerConfig.tiny(vocab_size=50)), TrainingConfig())
    assert isinstance(model.metrics[0], ReplicaShareMean) and model.metrics[0].name == "loss"


def test_compile_model_makes_every_variable_before_the_first_step():
    """Variables made inside the first step's trace make TensorFlow trace it twice, with an
    initializer branch per variable (2.3x the first fit's CPU time): `compile_model` builds the
    model and its optimizer, so that `fit` makes none."""
    import tensorflow as tf

    model = compile_model(Transformer(TransformerConfig.tiny(vocab_size=50)), TrainingConfig())
    assert model.built and model.optimizer.built
    paths = [variable.path for variable in model.variables + model.optimizer.variables]
    batch = ((SOURCE, TARGET_IN), np.array([[11, 12, 2], [14, 2, 0]], np.int32))
    model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
    assert [variable.path for variable in model.variables + model.optimizer.variables] == paths


def test_evaluate_on_a_finite_dataset_is_the_mean_of_its_batch_losses():
    """Keras ends a finite dataset with an empty step; it must not count as a step of loss 0
    (it did: three batches averaged over four steps, one batch over two)."""
    import tensorflow as tf

    from keras_transformer.training.losses import LabelSmoothedCrossEntropy

    model = compile_model(Transformer(TransformerConfig.tiny(vocab_size=50, dropout=0.0)), TrainingConfig())
    rng = np.random.default_rng(0)
    batches = [rng.integers(3, 50, size=(3, size, 6)).astype("int32") for size in (2, 3, 2)]
    data = [((ids[0], ids[1]), ids[2]) for ids in batches]
    losses = [float(LabelSmoothedCrossEntropy()(target, model(inputs))) for inputs, target in data]
    spec = ((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32))
    dataset = tf.data.Dataset.from_generator(lambda: iter(data), output_signature=spec)
    assert model.evaluate(dataset, verbose=0, return_dict=True)["loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert model.evaluate(dataset.take(1), verbose=0, return_dict=True)["loss"] == pytest.approx(losses[0], rel=1e-5)


def test_a_keras_file_of_the_distributed_transformer_loads_as_a_transformer(tmp_path):
    model = compile_model(Transformer(TransformerConfig.tiny(vocab_size=50, dropout=0.0)), TrainingConfig())
    model.build()
    model.optimizer.build(model.trainable_variables)  # as after training
    model.save(tmp_path / "model.keras")
    # The file as 0.1.0 wrote it for the model that `training.train` built.
    with zipfile.ZipFile(tmp_path / "model.keras") as saved, zipfile.ZipFile(tmp_path / "old.keras", "w") as old:
        for item in saved.infolist():
            data = saved.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                assert config["registered_name"] == "keras_transformer>Transformer"
                config.update(
                    module="keras_transformer.training.distribute",
                    class_name="DistributedTransformer",
                    registered_name="keras_transformer>DistributedTransformer",
                )
                data = json.dumps(config).encode()
            old.writestr(item, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "`compile()` was not called as part of model loading"
        reloaded = keras.saving.load_model(tmp_path / "old.keras")
    assert type(reloaded) is Transformer and reloaded.config == model.config
    assert reloaded.compiled and not isinstance(reloaded.metrics[0], ReplicaShareMean)  # Keras compiled it
    assert isinstance(fit_under_tf_distribute(reloaded).metrics[0], ReplicaShareMean)
    np.testing.assert_array_equal(reloaded.optimizer.variables[0], model.optimizer.variables[0])
    np.testing.assert_array_equal(reloaded((SOURCE, TARGET_IN)), model((SOURCE, TARGET_IN)))
