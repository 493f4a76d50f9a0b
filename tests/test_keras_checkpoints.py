"""Keras' checkpoints (`ckpt-N.weights.h5`), what `train` writes on JAX and PyTorch (issue 38): kept,
listed, recovered and read as TensorFlow's are, by the same model-dir code. Run here on TensorFlow,
whose Keras writes and reads the same files (`keras_checkpoint.KerasCheckpoint`)."""

import errno
import os

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.keras_checkpoint import KerasCheckpoint
from keras_transformer.model_dir import CheckpointWriteError, ModelDirError
from keras_transformer.model_dir import checkpoints as checkpoints_module
from keras_transformer.model_dir.checkpoints import checkpoint_paths, restore, restore_newest, save_weights
from keras_transformer.training.backends import refusal
from keras_transformer.training.optimization import compile_model


def tiny(vocab_size=60, ema_decay=None, compiled=True):
    config = kt.TransformerConfig.tiny(vocab_size=vocab_size, num_layers=1, max_length=24)
    model = kt.Transformer(config)
    if compiled:
        return compile_model(model, kt.TrainingConfig(ema_decay=ema_decay))
    model.build()
    return model


def step_to(model, step: int) -> None:
    """Set the optimizer's step count and a weight that tells checkpoints apart."""
    model.optimizer.iterations.assign(step)
    model.embedding.embeddings.assign(np.full(model.embedding.embeddings.shape, step, np.float32))


@pytest.fixture
def saved(tmp_path):
    """A model dir's checkpoints/ with Keras checkpoints of steps 1, 2 and 3, two kept."""
    directory = kt.ModelDir(str(tmp_path / "model"))
    model = tiny()
    manager = directory.checkpoint_manager(KerasCheckpoint(model, model.optimizer), keep=2)
    for step in (1, 2, 3):
        step_to(model, step)
        manager.save(checkpoint_number=step)
    return directory, model


def test_the_newest_are_kept_and_listed_as_tensorflow_lists_them(saved):
    directory, _ = saved
    files = sorted(os.listdir(directory.checkpoint_dir))
    assert files == ["checkpoint", "ckpt-2.weights.h5", "ckpt-3.weights.h5"]
    assert [os.path.basename(path) for path in directory.checkpoints()] == ["ckpt-3", "ckpt-2"]
    assert directory.latest_checkpoint().endswith("ckpt-3")


def test_a_resume_restores_the_weights_and_the_optimizer_step(saved):
    directory, _ = saved
    model = tiny()
    restore_newest(KerasCheckpoint(model, model.optimizer), directory.checkpoints())
    assert int(model.optimizer.iterations.numpy()) == 3
    assert float(model.embedding.embeddings.numpy()[0, 0]) == 3.0


def test_a_corrupt_state_file_falls_back_to_the_files_and_is_repaired(saved):
    directory, model = saved
    state = os.path.join(directory.checkpoint_dir, "checkpoint")
    with open(state, "w") as f:
        f.write("\x00garbage")
    warnings = []
    assert [os.path.basename(path) for path in checkpoint_paths(directory.checkpoint_dir, warnings.append)] == [
        "ckpt-3",
        "ckpt-2",
    ]
    assert "found 2 checkpoint(s) from their files, the newest" in warnings[0]
    manager = directory.checkpoint_manager(KerasCheckpoint(model, model.optimizer), keep=2, warn=warnings.append)
    step_to(model, 4)
    manager.save(checkpoint_number=4)  # the repaired state file goes on pruning
    assert sorted(os.listdir(directory.checkpoint_dir)) == ["checkpoint", "ckpt-3.weights.h5", "ckpt-4.weights.h5"]


def test_a_truncated_newest_checkpoint_is_skipped_with_a_warning(saved):
    directory, _ = saved
    newest = directory.latest_checkpoint() + ".weights.h5"
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    model, warnings = tiny(), []
    used = restore_newest(KerasCheckpoint(model, model.optimizer), directory.checkpoints(), warn=warnings.append)
    assert used.endswith("ckpt-2") and int(model.optimizer.iterations.numpy()) == 2
    assert "using " + used in warnings[0] and "ckpt-3: Unable to synchronously open file (truncated file" in warnings[0]


def test_an_optimizer_of_other_settings_is_refused_not_skipped(saved):
    """Keras' own `load_weights` only warns and leaves a fresh optimizer when the counts differ."""
    directory, _ = saved
    model = tiny(ema_decay=0.9)  # a moving average: one more variable per weight
    with pytest.raises(ModelDirError, match=r"ckpt-3: it holds \d+ optimizer variables, the run's optimizer has"):
        restore(KerasCheckpoint(model, model.optimizer), directory.latest_checkpoint())


def test_a_model_of_another_architecture_is_refused_in_one_line(saved):
    directory, _ = saved
    with pytest.raises(ModelDirError) as caught:
        restore(KerasCheckpoint(tiny(vocab_size=70, compiled=False)), directory.latest_checkpoint(), weights_only=True)
    assert "cannot restore checkpoint" in str(caught.value) and "\n" not in str(caught.value)


def test_a_run_resumes_only_from_checkpoints_of_its_own_kind(saved):
    import tensorflow as tf

    directory, _ = saved
    model = tiny()
    with pytest.raises(ModelDirError, match="written on JAX or PyTorch .* --backend jax or torch, or fine-tune"):
        restore(tf.train.Checkpoint(model=model, optimizer=model.optimizer), directory.latest_checkpoint())
    prefix = tf.train.Checkpoint(model=model).save(os.path.join(directory.path, "tf", "ckpt"))
    with pytest.raises(ModelDirError, match="written on TensorFlow: train it with --backend tensorflow"):
        restore(KerasCheckpoint(model, model.optimizer), prefix)


def test_the_tensorflow_tools_load_a_model_dir_of_keras_checkpoints(saved, tokenizer):
    directory, _ = saved
    config = kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, max_length=24)
    directory.write(config, kt.TrainingConfig(), "fixture", tokenizer)
    trained = tiny(vocab_size=tokenizer.vocab_size)
    step_to(trained, 7)
    directory.checkpoint_manager(KerasCheckpoint(trained, trained.optimizer)).save(checkpoint_number=7)
    model, _, values = kt.load_model(directory.path)
    assert values["checkpoint_path"].endswith("ckpt-7")
    for loaded, saved_weight in zip(model.weights, trained.weights):
        np.testing.assert_array_equal(loaded.numpy(), saved_weight.numpy())


def test_weights_only_checkpoints_are_replaced_whole_and_a_failed_write_keeps_the_last(tmp_path, monkeypatch):
    """best/, ema/ and averaged/ on JAX and PyTorch (`weights_checkpoint` gives a `KerasCheckpoint`
    there): the newest kept, TensorFlow's of an earlier run pruned too, a full disk reported."""
    import tensorflow as tf

    best = str(tmp_path / "best")
    model = tiny(compiled=False)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), best, 1, checkpoint_name="ckpt").save(5)
    monkeypatch.setattr(checkpoints_module, "weights_checkpoint", KerasCheckpoint)
    save_weights(model, best, 6)
    assert sorted(os.listdir(best)) == ["checkpoint", "ckpt-6.weights.h5"]

    def full_disk(self, prefix):
        open(prefix + "_temp.weights.h5", "w").close()  # a partial file, which the write removes
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(KerasCheckpoint, "write", full_disk)
    with pytest.raises(CheckpointWriteError, match=r"no space left on device .*ckpt-7; the last good one is .*ckpt-6"):
        save_weights(model, best, 7)
    assert sorted(os.listdir(best)) == ["checkpoint", "ckpt-6.weights.h5"]
    assert not os.path.exists(best + ".tmp")


def test_train_refuses_what_tensorflow_alone_does_in_one_line():
    training = kt.TrainingConfig()
    assert refusal("tensorflow", kt.TrainingConfig(bleu_every_epochs=1), "mirrored") is None
    assert refusal("jax", training) is None and refusal("torch", training, "one-device") is None
    assert refusal("jax", training, "mirrored") is None  # keras.distribution.DataParallel
    assert refusal("torch", training, "mirrored") == (
        "--strategy mirrored is TensorFlow's (tf.distribute): on torch, train on one device"
    )
    assert refusal("jax", training, "tpu") == (
        "--strategy tpu is TensorFlow's (tf.distribute): on jax, auto and mirrored train on every device JAX sees "
        "(keras.distribution.DataParallel), one-device on one"
    )
    assert refusal("torch", kt.TrainingConfig(bleu_every_epochs=1)) is None  # a TensorFlow process translates
    assert "torch.compile" in refusal("torch", kt.TrainingConfig(jit_compile=True))
    assert refusal("jax", kt.TrainingConfig(jit_compile=True)) is None  # JAX always compiles


def test_train_backend_in_a_process_already_on_another_backend_says_so(tmp_path, capsys):
    from keras_transformer.cli.main import main

    model_dir = str(tmp_path / "model")
    assert main(["train", "--backend", "jax", "--data", "x.tsv", "--model-dir", model_dir]) == 2
    error = capsys.readouterr().err
    assert "Keras runs on tensorflow in this process already" in error and len(error.splitlines()) == 1
    assert not os.path.exists(model_dir)
