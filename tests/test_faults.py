"""The faults a long training and a translation service meet, each sent for real: two `train`
processes on one model dir, a lock left by a `kill -9`, a truncated checkpoint, a full disk (a
small tmpfs, or an injected error), bytes that are not UTF-8 on stdin, a TFDS dataset that is not
prepared, many threads calling one Translator; and what ten epochs leave in the model dir.

The models trained here have one layer each side: no fault here depends on depth, and a layer less
halves every trace."""

import errno
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE, ONE_PAIR_FLAGS, TINY_TRAINING

from keras_transformer.cli.main import main
from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.model_dir import CheckpointWriteError, ModelDir, ModelDirError, ModelDirLocked, load_model
from keras_transformer.model_dir.checkpoints import save_checkpoint

EPOCHS, STEPS_PER_EPOCH, KEEP = 10, 2, 3
TRAINING = dict(batch_tokens=512, warmup_steps=10, steps_per_epoch=STEPS_PER_EPOCH, keep_checkpoints=KEEP)
TRAIN_FLAGS = ["train", "--data", str(FIXTURE), *TINY_TRAINING, "--num-layers", "1"]
TRAIN_FLAGS += ["--steps-per-epoch", str(STEPS_PER_EPOCH)]
USER_ENV = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_TRANSFORMER_DEBUG")}


def cli(*args, stdin=None, timeout=300):
    """`python -m keras_transformer ARGS` in a fresh process, as a user's terminal runs it."""
    command = [sys.executable, "-m", "keras_transformer", *args]
    return subprocess.run(command, input=stdin, capture_output=True, env=USER_ENV, timeout=timeout)


def tiny(max_steps: int, **training) -> tuple[TransformerConfig, TrainingConfig]:
    return TransformerConfig.tiny(vocab_size=300, num_layers=1), TrainingConfig(
        **{**TRAINING, "max_steps": max_steps, **training}
    )


def train_tiny(model_dir, max_steps: int, log=None, **training):
    from keras_transformer.training.trainer import train

    lines = []
    train(
        str(model_dir), *tiny(max_steps, **training), DataConfig(data=str(FIXTURE)), verbose=0, log=log or lines.append
    )
    return lines


def checkpoint_steps(model_dir) -> list[int]:
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0]) for p in glob.glob(f"{model_dir}/checkpoints/ckpt-*.index"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained for 10 epochs of 2 steps, BLEU (and best/) every 5 epochs, keeping 3."""
    model_dir = tmp_path_factory.mktemp("faults") / "model"
    train_tiny(model_dir, EPOCHS * STEPS_PER_EPOCH, bleu_every_epochs=5, bleu_sentences=4)
    return model_dir


@pytest.fixture(scope="module")
def untrained(tmp_path_factory, tokenizer):
    """A model dir holding random weights: unlike the tiny trained model (which says one word over
    and over), its translations differ from sentence to sentence, so that an order can be seen.
    Its max_length of 16 bounds every search to 16 steps (a random model rarely ends sooner)."""
    from keras_transformer.model import Transformer

    model_dir = ModelDir(str(tmp_path_factory.mktemp("faults") / "untrained"))
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=16)
    model_dir.write(config, TrainingConfig(), DataConfig(data=str(FIXTURE)), tokenizer)
    keras.utils.set_random_seed(3)  # the same weights whichever test comes first (seeds 0-2 say less)
    model = Transformer(config)
    model.build()
    model_dir.checkpoint_manager(tf.train.Checkpoint(model=model)).save(checkpoint_number=1)
    return model_dir.path


@pytest.fixture
def copy_of(trained, tmp_path):
    return lambda: shutil.copytree(trained, tmp_path / "model")


def test_ten_epochs_leave_only_keep_checkpoints_and_one_best(trained):
    assert checkpoint_steps(trained) == [16, 18, 20]
    assert len(ModelDir(str(trained)).checkpoints()) == KEEP
    assert len(glob.glob(f"{trained}/best/ckpt-*.index")) == 1
    assert not os.path.exists(ModelDir(str(trained)).lock_path())  # released
    sizes = {
        part: sum(os.path.getsize(p) for p in glob.glob(f"{trained}/{part}/**", recursive=True) if os.path.isfile(p))
        for part in ("checkpoints", "best", "logs")
    }
    one_checkpoint = sum(os.path.getsize(p) for p in glob.glob(f"{trained}/checkpoints/ckpt-20.*"))
    assert sizes["checkpoints"] < (KEEP + 0.5) * one_checkpoint
    assert sizes["logs"] < 2_000_000, sizes  # scalars and one graph: a few hundred bytes an epoch


# --- two trainings on one model dir -------------------------------------------------------------

HOLD = "import sys, time\nfrom keras_transformer.model_dir import ModelDir\nwith ModelDir(sys.argv[1]).lock():\n"
HOLD += "    print('locked', flush=True)\n    time.sleep(600)\n"


def hold_lock(model_dir) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(model_dir)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_train_on_a_model_dir_in_use_refuses_naming_the_first_and_a_killed_ones_lock_is_taken_over(
    tmp_path, capsys
):
    """One lock holder (a process of its own, as another `train` is): while it lives, a `train` on its
    model dir is refused; once it is killed (no chance to release the lock), the lock is stale and
    taken over."""
    model_dir = tmp_path / "model"
    holder = hold_lock(model_dir)
    try:
        status = main([*TRAIN_FLAGS, "--model-dir", str(model_dir), "--max-steps", "2"])
        stderr = capsys.readouterr().err
        assert status == 2
        assert stderr == (
            f"keras-transformer: error: {model_dir} is in use by another train (host {socket.gethostname()}, "
            f"PID {holder.pid}; lock file {model_dir}/train.lock): wait for it to end, or use another --model-dir\n"
        )
        assert os.listdir(model_dir) == ["train.lock"]  # no tokenizer, no config.json: nothing written
    finally:
        holder.send_signal(signal.SIGKILL)  # no chance to release it
        holder.wait()
    lock = ModelDir(str(model_dir)).lock_path()
    assert open(lock).read() == f"{socket.gethostname()} {holder.pid}\n"
    with ModelDir(str(model_dir)).lock():
        assert open(lock).read() == f"{socket.gethostname()} {os.getpid()}\n"
    assert not os.path.exists(lock)
    assert f"took over the stale lock of PID {holder.pid} (no such process)" in capsys.readouterr().err


RACE = """import os, socket, sys, time
from keras_transformer.model_dir import ModelDir, ModelDirLocked
gethostname = socket.gethostname
socket.gethostname = lambda: time.sleep(0.02) or gethostname()  # a wider window between read and act
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):  # every taker starts at once
    time.sleep(0.001)
try:
    with ModelDir(sys.argv[1]).lock():
        print("won", flush=True)
        time.sleep(2)  # hold it until every other taker has tried
except ModelDirLocked:
    print("refused", flush=True)
"""


def stale_lock(model_dir) -> int:
    """Leave in `model_dir` the lock of a process that is gone, as a `kill -9` does; return its PID."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.makedirs(model_dir, exist_ok=True)
    with open(ModelDir(str(model_dir)).lock_path(), "w") as f:
        f.write(f"{socket.gethostname()} {dead.pid}\n")
    return dead.pid


def race_for_the_lock(model_dir, takers: int) -> list[str]:
    """`takers` threads take the lock of `model_dir` at once; each says "won" or "refused"; a winner
    holds the lock until every other taker has tried."""
    start, tried, outcomes = threading.Barrier(takers), threading.Barrier(takers, timeout=60), []

    def take():
        start.wait()
        try:
            with ModelDir(str(model_dir)).lock():
                outcomes.append("won")
                tried.wait()
        except ModelDirLocked:
            outcomes.append("refused")
            tried.wait()

    threads = [threading.Thread(target=take) for _ in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_many_threads_taking_over_one_stale_lock_at_once_leave_exactly_one_holder(tmp_path, monkeypatch):
    """8 threads take over a stale lock at once, 10 times over; the window between reading the lock
    and acting on it widened (a slow `socket.gethostname`, which every taker calls): one wins each time."""
    gethostname = socket.gethostname
    monkeypatch.setattr(socket, "gethostname", lambda: time.sleep(0.02) or gethostname())
    for attempt in range(10):
        model_dir = tmp_path / f"model-{attempt}"
        stale_lock(model_dir)
        outcomes = race_for_the_lock(model_dir, 8)
        assert sorted(outcomes) == ["refused"] * 7 + ["won"], (attempt, outcomes)
        assert not os.path.exists(ModelDir(str(model_dir)).lock_path())  # released by the one winner


@pytest.mark.slow  # 6 processes importing TensorFlow: the threads above race in `make test`
def test_many_processes_taking_over_one_stale_lock_at_once_leave_exactly_one_trainer(tmp_path):
    model_dir, go = tmp_path / "model", tmp_path / "go"
    dead = stale_lock(model_dir)
    command = [sys.executable, "-c", RACE, str(model_dir), str(go)]
    takers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    for taker in takers:
        assert taker.stdout.readline() == "ready\n"
    go.touch()
    results = [taker.communicate(timeout=60) for taker in takers]
    assert sorted(out for out, _ in results) == ["refused\n"] * 5 + ["won\n"], results
    warnings = [err for _, err in results if "took over" in err]
    assert len(warnings) == 1 and f"took over the stale lock of PID {dead} (no such process)" in warnings[0]


# --- a truncated checkpoint ---------------------------------------------------------------------


def truncate(prefix: str) -> None:
    (data,) = glob.glob(prefix + ".data-*")
    os.truncate(data, os.path.getsize(data) // 2)


def test_translate_falls_back_past_a_truncated_checkpoint_and_a_named_one_stays_strict(copy_of, capsys):
    model_dir = copy_of()
    newest, older = (f"{model_dir}/checkpoints/ckpt-{step}" for step in (20, 18))
    truncate(newest)
    model, _, _ = load_model(str(model_dir))
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1
    assert warning.startswith(
        f"warning: using {older}, the newest checkpoint that restores (cannot restore checkpoint {newest}: "
    )
    expected, _, _ = load_model(str(model_dir), older)
    for ours, theirs in zip(model.weights, expected.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(ModelDirError, match=f"^cannot restore checkpoint {newest}: "):
        load_model(str(model_dir), newest)


def test_a_resume_falls_back_past_a_truncated_checkpoint(copy_of):
    model_dir = copy_of()
    truncate(f"{model_dir}/checkpoints/ckpt-20")
    lines = train_tiny(model_dir, 22)
    assert lines[0].startswith(f"using {model_dir}/checkpoints/ckpt-18, the newest checkpoint that restores")
    assert lines[1] == "resumed from step 18"
    assert checkpoint_steps(model_dir)[-1] == 22


# --- a full disk ---------------------------------------------------------------------------------
# A real small filesystem: a tmpfs mounted over the model dir (root may mount: CI runs as root),
# shrunk to what it holds plus less than the next checkpoint, so the write fails with ENOSPC where a
# user's disk fills. Its checkpoints/ and logs/ are links to the test's own disk: the one write that
# finds the disk full is the one under test. Where no tmpfs can be mounted these tests skip, naming
# why, but fail under CI (CI=true), which must run them.


def why_no_tmpfs() -> str | None:
    """None if this process may mount a tmpfs (root with CAP_SYS_ADMIN; tried on a temporary dir),
    else why not."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return "mounting a tmpfs needs root and mount(8)"
    import tempfile

    with tempfile.TemporaryDirectory() as probe:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True)
        if mounted.returncode:
            return f"mount -t tmpfs failed: {mounted.stderr.decode().strip()}"
        subprocess.run(["umount", probe], check=True)
    return None


class SmallDisk:
    """A model dir on a tmpfs of its own (`path`), its checkpoints/ and logs/ on the test's disk."""

    def __init__(self, root):
        self.mount = root / "small"
        self.path = self.mount / "model"
        self.disk = root / "disk"

    def fill_from(self, model_dir=None):
        """Make the model dir, with `model_dir`'s files (if given)."""
        self.disk.mkdir()
        for part in ("checkpoints", "logs"):
            source = model_dir and os.path.join(model_dir, part)
            if source and os.path.isdir(source):
                shutil.copytree(source, self.disk / part)
            else:
                (self.disk / part).mkdir()
        if model_dir:
            shutil.copytree(model_dir, self.path, ignore=lambda d, names: [n for n in names if d == str(model_dir)
                            and n in ("checkpoints", "logs")])  # fmt: skip
        self.path.mkdir(exist_ok=True)
        for part in ("checkpoints", "logs"):
            os.symlink(self.disk / part, self.path / part)
        return self.path

    def leave(self, spare: int) -> None:
        """Shrink the filesystem to what it holds plus `spare` bytes (whole pages)."""
        stat = os.statvfs(self.mount)
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        size = (used + spare) // 4096 * 4096
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.mount)], check=True)


@pytest.fixture
def tmpfs():
    """Skip where no tmpfs can be mounted, naming why; under CI (CI=true) fail instead."""
    reason = why_no_tmpfs()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the full-disk tests on a real tmpfs: {reason}")
        pytest.skip(reason)


@pytest.fixture
def small_disk(tmpfs, tmp_path):
    disk = SmallDisk(tmp_path)
    disk.mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk.mount)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk.mount)], check=True)


def weights_files(directory) -> dict:
    """{file name: its bytes} of a weights-only checkpoint directory."""
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def half_a_checkpoint(directory) -> int:
    """Half the bytes of the weights checkpoint in `directory`: room for its small files, not its data."""
    return sum(os.path.getsize(p) for p in glob.glob(f"{directory}/ckpt-*")) // 2


def assert_one_line_and_kept(stderr: str, directory, step: int, last_good: int, before: dict) -> None:
    """The run's one error line names the failed checkpoint and the last good one, which is intact."""
    errors = [line for line in stderr.splitlines() if "error" in line or "Traceback" in line]
    assert errors == [
        f"keras-transformer: error: no space left on device writing checkpoint {directory}/ckpt-{step}; "
        f"the last good one is {directory}/ckpt-{last_good}"
    ]
    assert weights_files(directory) == before  # the previous checkpoint, intact
    assert not glob.glob(f"{directory}.*")  # no temporary sibling left


def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_no_partial_files(trained, tmpfs, tmp_path, capsys):
    one_checkpoint = sum(os.path.getsize(p) for p in glob.glob(f"{trained}/checkpoints/ckpt-20.*"))
    model_dir = tmp_path / "model"
    checkpoints = model_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    size = int(1.6 * one_checkpoint) // 4096 * 4096  # room for one checkpoint, not two
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(checkpoints)], check=True)
    try:
        status = main([*TRAIN_FLAGS, "--model-dir", str(model_dir), "--max-steps", "6"])
        stderr = capsys.readouterr().err
        left = sorted(os.listdir(checkpoints))
    finally:
        subprocess.run(["umount", str(checkpoints)], check=True)
    assert status == 2
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert errors == [
        f"keras-transformer: error: no space left on device writing checkpoint {checkpoints}/ckpt-4; "
        f"the last good one is {checkpoints}/ckpt-2"
    ]
    assert "Traceback" not in stderr
    assert left == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]


def test_a_failed_checkpoint_write_removes_its_files_and_names_the_last_good_one(tmp_path, monkeypatch):
    variable = tf.Variable([1.0, 2.0])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), str(tmp_path), max_to_keep=3)
    save_checkpoint(manager, 2)

    def disk_full(self, prefix, **options):  # SaveV2 failing half-way through its shard, as on a full disk
        os.makedirs(prefix + "_temp")
        with open(f"{prefix}_temp/part-00000-of-00001.data-00000-of-00001", "wb") as f:
            f.write(b"half")
        raise tf.errors.ResourceExhaustedError(None, None, f"{prefix}_temp/part-00000; No space left on device")

    monkeypatch.setattr(tf.train.Checkpoint, "_write", disk_full)  # what CheckpointManager.save calls
    with pytest.raises(CheckpointWriteError) as error:
        save_checkpoint(manager, 4)
    assert str(error.value) == (
        f"no space left on device writing checkpoint {tmp_path}/ckpt-4; the last good one is {tmp_path}/ckpt-2"
    )
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")

    monkeypatch.setattr(tf.train.Checkpoint, "_write", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EIO, "I/O")))
    with pytest.raises(CheckpointWriteError, match=r"^cannot write \(\[Errno 5\] I/O\) writing checkpoint .*ckpt-6"):
        save_checkpoint(manager, 6)


def test_a_full_disk_while_averaging_is_one_line_and_keeps_the_previous_average(trained, small_disk, capsys):
    model_dir = small_disk.fill_from(trained)
    assert main(["average", "--model-dir", str(model_dir), "--last", "2"]) == 0
    averaged = model_dir / "averaged"
    before = weights_files(averaged)
    small_disk.leave(half_a_checkpoint(averaged))
    capsys.readouterr()
    assert main(["average", "--model-dir", str(model_dir), "--last", "3"]) == 2
    assert_one_line_and_kept(capsys.readouterr().err, averaged, 20, 20, before)
    load_model(str(model_dir), "averaged")


# Two epochs of 2 steps on the small disk, then 2 more with the disk full at the second epoch's end:
# its training checkpoint (on the test's disk) is written, the weights under test are not.
FULL_DISK_FLAGS = [*TRAIN_FLAGS, "--bleu-sentences", "4"]


def train_twice(small_disk, capsys, flags, between=lambda model_dir: None):
    """(the model dir, stderr of the second run) of `train FLAGS` for 2 steps then, with `between`
    done and the disk left with half a checkpoint's room over what the first run wrote, for 4."""
    model_dir = small_disk.fill_from()
    flags = [*FULL_DISK_FLAGS, *flags, "--model-dir", str(model_dir)]
    assert main([*flags, "--max-steps", "2"]) == 0, capsys.readouterr().err[-2000:]
    between(model_dir)
    weights = next(d for d in ("ema", "best") if (model_dir / d).is_dir())
    small_disk.leave(half_a_checkpoint(model_dir / weights))
    capsys.readouterr()
    assert main([*flags, "--max-steps", "4"]) == 2
    stderr = capsys.readouterr().err
    assert checkpoint_steps(model_dir)[-1] == 4  # the training checkpoint before the failed write: nothing lost
    return model_dir, stderr


@pytest.mark.slow
def test_a_full_disk_while_writing_ema_ends_train_in_one_line_and_keeps_the_previous_ema(small_disk, capsys):
    befores = {}
    model_dir, stderr = train_twice(
        small_disk, capsys, ["--ema-decay", "0.9"], lambda model_dir: befores.update(weights_files(model_dir / "ema"))
    )
    assert sorted(befores) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    assert_one_line_and_kept(stderr, model_dir / "ema", 4, 2, befores)
    load_model(str(model_dir), "ema")


def beaten_record(path, key: str, value: float) -> dict:
    """Set the recorded best at `path` (`key`: its field) to `value`, which the next evaluation
    beats, so that it writes best/; return best/'s files."""
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**record, key: value}, f)
    return weights_files(path.parent / "best" if path.parent.name != "best" else path.parent)


@pytest.mark.slow
def test_a_full_disk_while_writing_the_best_bleus_weights_ends_train_in_one_line_and_keeps_the_previous_best(
    small_disk, capsys
):
    """training/callbacks/bleu.py: a better validation BLEU writes best/ (its record bleu.json set to
    -1 after the first run, so that the second run's BLEU is better)."""
    befores = {}
    record = lambda model_dir: befores.update(beaten_record(model_dir / "best" / "bleu.json", "bleu", -1.0))
    model_dir, stderr = train_twice(small_disk, capsys, ["--bleu-every-epochs", "1"], record)
    assert "ckpt-2.index" in befores
    assert_one_line_and_kept(stderr, model_dir / "best", 4, 2, befores)
    load_model(str(model_dir), "best")


@pytest.mark.slow
def test_a_full_disk_while_early_stopping_writes_the_best_loss_weights_ends_train_in_one_line(small_disk, capsys):
    """training/callbacks/early_stopping.py without BLEU: a better validation loss writes best/ (the
    recorded best loss set to 1e9 after the first run)."""
    befores = {}
    record = lambda model_dir: befores.update(beaten_record(model_dir / "early_stopping.json", "best", 1e9))
    model_dir, stderr = train_twice(small_disk, capsys, ["--early-stopping", "5"], record)
    assert "ckpt-2.index" in befores
    assert_one_line_and_kept(stderr, model_dir / "best", 4, 2, befores)
    load_model(str(model_dir), "best")


# --- stdin that is not UTF-8, streamed ------------------------------------------------------------


# Slow (issue 50 item 10): a process of its own; `make test` reads stdin in tests/test_cli.py.
@pytest.mark.slow
def test_translate_streams_stdin_one_line_out_per_line_in_bad_bytes_replaced(untrained, fixture_pairs):
    sources = [" ".join(source.split()[:2]).encode() for source in fixture_pairs[0][:30]]  # within max_length
    # 2,100 lines, three chunks of stdin: one in ten a sentence (decoded), the others blank.
    lines = [sources[i // 10 % 30] if i % 10 == 3 else b"" if i % 2 else b"  " for i in range(2100)]
    specials = {1200: b"ok then", 1201: b"bad \xff\xfe bytes", 1202: b"a NUL\x00here"}
    lines[1200:1203] = specials.values()
    lines.append("bad \ufffd\ufffd bytes".encode())  # what line 1202 (1-based) becomes
    stdin = b"\n".join(lines) + b"\n"
    result = cli("translate", "--model-dir", untrained, "--beam-size", "1", "--batch-size", "128", stdin=stdin)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.decode() == (
        "keras-transformer: warning: stdin line 1202: invalid UTF-8 (byte 0xff at offset 4) replaced by U+FFFD\n"
    )
    out = result.stdout.decode().split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[1201] == out[-2]  # the bad line translated as its replaced text
    assert len({out[i] for i in range(3, 300, 10)}) > 8  # 30 sentences: (random weights) 13 translations
    first = {}
    for index, line in enumerate(lines[:2100]):  # in input order across chunks: a repeated line, one output
        if index not in specials:
            assert out[index] == out[first.setdefault(line, index)], index
        if not line.strip():  # a document of whitespace alone: its whitespace (split by default)
            assert out[index] == line.decode(), index


def test_strict_input_refuses_a_bad_line_naming_it(trained, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok then\nbad \xff\xfe\n")))
    assert main(["translate", "--model-dir", str(trained), "--beam-size", "1", "--strict-input"]) == 2
    assert capsys.readouterr().err == (
        "keras-transformer: error: stdin line 2: invalid UTF-8 (byte 0xff at offset 4); "
        "drop --strict-input to translate it with U+FFFD in place\n"
    )


# --- TFDS without the data -------------------------------------------------------------------------


def test_an_unprepared_tfds_dataset_fails_at_once_saying_what_to_prepare(tmp_path):
    started = time.monotonic()
    empty = tmp_path / "tfds"
    empty.mkdir()
    result = cli(
        "train",
        "--data",
        "tfds:wmt14_translate/de-en",
        "--tfds-data-dir",
        str(empty),
        "--model-dir",
        str(tmp_path / "m"),
    )
    assert time.monotonic() - started < 60  # TFDS' own retries take ~3.5 minutes
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"keras-transformer: error: cannot load tfds:wmt14_translate/de-en: it is not prepared in {empty}; prepare it "
        "where there is internet (tfds build wmt14_translate/de-en --data_dir DIR) and pass --tfds-data-dir DIR, "
        "or pass --tfds-download to download and prepare it now\n"
    )


# --- user-facing install hints ------------------------------------------------------------------------


def test_install_hints_name_our_distribution(monkeypatch):
    from keras_transformer.exporters.ctranslate2 import CTranslate2ExportError, _ctranslate2
    from keras_transformer.plots.visualize import _pyplot

    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(CTranslate2ExportError, match=r"pip install 'keras-aiayn\[ctranslate2\]'$"):
        _ctranslate2()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'keras-aiayn\[notebooks\]'$"):
        _pyplot()


# --- one Translator, many threads ---------------------------------------------------------------------


def test_threads_first_alignments_build_one_function(tokenizer, monkeypatch):
    """8 threads ask a cold Translator for alignments at once (the window widened by a slow
    `graph_function`): one function is built, and every thread gets the same alignments."""
    import keras_transformer as kt
    from keras_transformer.translation import pipeline as pipeline_module

    builds, make = [], pipeline_module.graph_function

    def slow_graph_function(*args, **kwargs):
        builds.append(1)
        time.sleep(0.05)
        return make(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "graph_function", slow_graph_function)
    model = kt.Transformer(kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=16))
    translator = kt.Translator(model, tokenizer)
    source, target = tf.constant([[5, 6, 7, 2]]), tf.constant([[8, 9, 2]])
    start, got = threading.Barrier(8), []

    def align():
        start.wait()
        got.append(translator.pipeline.alignments(source, target).numpy().tolist())

    threads = [threading.Thread(target=align) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(got) == 8 and all(result == got[0] for result in got)


@pytest.mark.slow
def test_a_translator_serves_eight_threads_as_it_serves_one(untrained, fixture_pairs, monkeypatch):
    """8 threads x 10 requests (20 distinct ones, of 1-3 sentences of 1-3 words) on one Translator,
    as a web service's thread pool calls it: the results of one thread, no error, one trace."""
    from keras_transformer.search import decoding
    from keras_transformer.translation.translator import Translator

    traces = []
    search_beams = decoding.search_beams
    monkeypatch.setattr(decoding, "search_beams", lambda *a, **k: traces.append(1) or search_beams(*a, **k))
    translator = Translator.from_model_dir(untrained, beam_size=2)
    words = [source.split()[:3] for source in fixture_pairs[0]]  # within max_length
    distinct = [[" ".join(words[(7 * i + j) % len(words)][: 1 + i % 3]) for j in range(1 + i % 3)] for i in range(20)]
    requests = [distinct[(i * 7) % 20] for i in range(80)]
    threaded, failures = [None] * len(requests), []

    def serve(worker):
        try:
            for index in range(worker, len(requests), 8):
                threaded[index] = translator.translate(requests[index])
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=serve, args=(worker,)) for worker in range(8)]
    for thread in threads:  # cold: the first calls trace concurrently
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    sequential = [translator.translate(request) for request in distinct]
    assert threaded == [sequential[(i * 7) % 20] for i in range(80)]
    assert len({tuple(translations) for translations in sequential}) > 10
    assert len(traces) == 1  # one trace of the search, shared by every thread and batch shape


# --- a resumed training is the uninterrupted one ---------------------------------------------------


def test_a_resumed_training_equals_an_uninterrupted_one(one_pair_run, tmp_path, capsys):
    """Through `train` itself (its ModelDir, CheckpointCallback and resume): 4 steps in one run
    (conftest's `one_pair_run`) vs 2 + 2 in two runs of the same command. The resumed stream is
    shuffled anew (seed + step), so the data is one pair repeated and dropout is off: every batch
    is the same, and the weights, Adam's moments and the step count must be too."""
    twice = tmp_path / "twice"
    for max_steps in ("2", "4"):
        argv = [
            "train",
            "--data",
            one_pair_run.data,
            "--model-dir",
            str(twice),
            *ONE_PAIR_FLAGS,
            "--max-steps",
            max_steps,
        ]
        assert main(argv) == 0, capsys.readouterr().err[-3000:]
    assert "resumed from step 2" in capsys.readouterr().err
    once = tf.train.load_checkpoint(f"{one_pair_run.model_dir}/checkpoints/ckpt-4")
    twice = tf.train.load_checkpoint(str(twice / "checkpoints" / "ckpt-4"))
    names = sorted(once.get_variable_to_shape_map())
    assert names == sorted(twice.get_variable_to_shape_map())
    moments = [name for name in names if "optimizer" in name and "VARIABLE_VALUE" in name]
    assert len(moments) > 10 and any("iteration" in name for name in names)
    for name in names:
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH":
            np.testing.assert_allclose(twice.get_tensor(name), once.get_tensor(name), rtol=1e-6, err_msg=name)


# --- the one-line errors, as a user's terminal shows them ------------------------------------------


def test_no_checkpoint_that_restores_is_one_line_in_a_terminal(copy_of):
    model_dir = copy_of()
    for step in checkpoint_steps(model_dir):
        truncate(f"{model_dir}/checkpoints/ckpt-{step}")
    result = cli("translate", "--model-dir", str(model_dir), "Jesus wept.")
    assert (result.returncode, result.stdout) == (2, b"")
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"keras-transformer: error: cannot restore checkpoint {model_dir}/checkpoints/ckpt-20: ")


@pytest.mark.slow
def test_a_nan_loss_is_one_line_in_a_terminal(tmp_path):
    flags = ["--learning-rate-scale", "1e30", "--warmup-steps", "1", "--max-steps", "6", "--checkpoint-every", "1"]
    result = cli(*TRAIN_FLAGS, "--model-dir", str(tmp_path / "model"), *flags)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    errors = [line for line in stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr[-2000:]
    assert errors[0].startswith("keras-transformer: error: the training loss became NaN or infinite at step ")
    assert errors[0].endswith("try a lower --learning-rate-scale")


# --- an unreadable checkpoints/checkpoint state file ------------------------------------------------

# What a crash while TensorFlow rewrites the state file, or a copy fault, leaves: nothing, half of
# it, or bytes that are not text.
BROKEN_STATES = {
    "empty": b"",
    "half": b'model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-16"\nall_model_checkpoint_pa',
    "garbled": b"\x00\xff\xfe\x00garbage",
}


@pytest.mark.parametrize("state", BROKEN_STATES)
def test_translate_finds_the_newest_checkpoint_from_the_files_when_the_state_file_is_broken(copy_of, capsys, state):
    model_dir = copy_of()
    (model_dir / "checkpoints" / "checkpoint").write_bytes(BROKEN_STATES[state])
    model, _, _ = load_model(str(model_dir))
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"warning: {model_dir}/checkpoints/checkpoint is unreadable")
    assert warning.endswith(f"found 3 checkpoint(s) from their files, the newest {model_dir}/checkpoints/ckpt-20")
    expected, _, _ = load_model(str(model_dir), f"{model_dir}/checkpoints/ckpt-20")
    for ours, theirs in zip(model.weights, expected.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.slow  # a process of its own: the load above is the same, in-process
def test_translate_in_a_terminal_says_which_checkpoint_it_found_when_the_state_file_is_empty(copy_of):
    model_dir = copy_of()
    (model_dir / "checkpoints" / "checkpoint").write_bytes(b"")
    result = cli("translate", "--model-dir", str(model_dir), "--beam-size", "1", "Jesus wept.")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().count("\n") == 1
    assert result.stderr.decode() == (
        f"warning: {model_dir}/checkpoints/checkpoint is unreadable: Invalid checkpoint state loaded from "
        f"{model_dir}/checkpoints; found 3 checkpoint(s) from their files, the newest {model_dir}/checkpoints/ckpt-20\n"
    )


@pytest.mark.parametrize("state", ["empty", pytest.param("half", marks=pytest.mark.slow)])
def test_a_resume_with_a_broken_state_file_goes_on_from_the_newest_checkpoint_never_from_step_0(copy_of, state):
    model_dir = copy_of()
    (model_dir / "checkpoints" / "checkpoint").write_bytes(BROKEN_STATES[state])
    lines = train_tiny(model_dir, 22)
    assert lines[0].startswith(f"{model_dir}/checkpoints/checkpoint is unreadable")
    assert lines[0].endswith(f"the newest {model_dir}/checkpoints/ckpt-20")
    assert lines[1] == "resumed from step 20"
    assert checkpoint_steps(model_dir) == [18, 20, 22]  # the state rewritten: the oldest pruned as before
    assert ModelDir(str(model_dir)).checkpoints()[0] == f"{model_dir}/checkpoints/ckpt-22"


# --- export --checkpoint averaged, then export --check ----------------------------------------------


@pytest.mark.slow  # two SavedModels written and checked
def test_an_export_of_averaged_weights_records_them_and_its_check_compares_with_them(untrained, tmp_path, capsys):
    """averaged/ holds other weights than the latest checkpoint (another random model): an export of
    them names them in translator.json, and `export --check` holds its artifacts to their
    translations (checked against the latest, every artifact failed)."""
    from keras_transformer.model import Transformer
    from keras_transformer.model_dir.checkpoints import save_weights

    model_dir = shutil.copytree(untrained, tmp_path / "model")
    keras.utils.set_random_seed(4)
    other = Transformer(ModelDir(str(model_dir)).read()["model"])
    other.build()
    averaged = save_weights(other, ModelDir(str(model_dir)).weights_dir("averaged"), 7)
    out = str(tmp_path / "export")
    export = ["export", "--model-dir", str(model_dir), "--checkpoint", "averaged", "--out", out, "--no-tflite"]
    assert main([*export, "--beam-size", "1"]) == 0, capsys.readouterr().err[-2000:]
    with open(os.path.join(out, "translator.json"), encoding="utf-8") as f:
        assert json.load(f)["checkpoint"] == {"name": "averaged", "paths": [os.path.abspath(averaged)]}
    capsys.readouterr()
    assert main(["export", "--check", out, "--sample", "20"]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    markup = [line for line in lines[1:] if "translate_markup" in line]  # each text SavedModel's, checked too
    floats = [line for line in lines[1:] if "translator_int8" not in line and line not in markup]  # int8: BLEU only
    assert len(lines) == 6 and len(markup) == 2 and len(floats) == 2, lines
    assert all("100% identical" in line for line in floats), lines


# --- --ema-decay under mixed_float16 ----------------------------------------------------------------


class RecordWeights(keras.callbacks.Callback):
    """The trainable weights after every optimizer step, in float64."""

    def __init__(self):
        super().__init__()
        self.after_step = []

    def on_train_batch_end(self, batch, logs=None):
        self.after_step.append([np.asarray(v.numpy(), np.float64) for v in self.model.trainable_variables])


@pytest.mark.slow
def test_ema_under_mixed_float16_writes_the_moving_average(tmp_path, monkeypatch):
    """mixed_float16 (what `--mixed-precision` picks on a GPU), forced here on the CPU: Keras wraps
    the optimizer in a LossScaleOptimizer, and the moving average lives in its inner optimizer.
    ema/ holds the average of the weights after each step, computed here by hand (EmaCheckpoint's
    formula: average_1 = w_1, average_t = D average_(t-1) + (1 - D) w_t), in float32."""
    from keras_transformer.training import trainer

    monkeypatch.setattr(trainer, "mixed_precision_policy", lambda strategy: "mixed_float16")
    model_dir, steps, decay = tmp_path / "model", RecordWeights(), 0.5
    config, training = tiny(3, mixed_precision=True, ema_decay=decay)
    trainer.train(str(model_dir), config, training, DataConfig(data=str(FIXTURE)), verbose=0, callbacks=[steps],
                  log=lambda line: None)  # fmt: skip
    reader = tf.train.load_checkpoint(f"{model_dir}/checkpoints/ckpt-3")
    assert any("LossScaleOptimizer" in name or "inner_optimizer" in name for name in reader.get_variable_to_shape_map())
    assert len(steps.after_step) == 3
    average = steps.after_step[0]
    for weights in steps.after_step[1:]:
        average = [decay * a + (1 - decay) * w for a, w in zip(average, weights)]
    model, _, _ = load_model(str(model_dir), "ema")
    assert all(weight.dtype == "float32" for weight in model.weights)
    for variable, expected in zip(model.trainable_variables, average):
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=variable.path)
    raw, _, _ = load_model(str(model_dir))
    assert not np.allclose(model.trainable_variables[0].numpy(), raw.trainable_variables[0].numpy())


# --- score's stdin, and --prefix-file and --constraints with a long stdin -----------------------------


class CountingStdin:
    """stdin, as a terminal's or a pipe's: text lines (strict UTF-8), or bytes from its `buffer`;
    `read` counts the lines read either way."""

    def __init__(self, lines: list[bytes]):
        self.lines, self.read = lines, 0
        self.buffer = self.binary()

    def binary(self):
        for line in self.lines:
            self.read += 1
            yield line + b"\n"

    def __iter__(self):
        return (line.decode("utf-8") for line in self.binary())


class Stdout:
    def __init__(self, stdin: CountingStdin):
        self.stdin, self.text, self.read_at_first_output = stdin, [], None

    def write(self, text: str) -> None:
        if self.read_at_first_output is None:
            self.read_at_first_output = self.stdin.read
        self.text.append(text)

    def flush(self) -> None:
        pass


def run_streamed(monkeypatch, argv, lines: list[bytes]) -> tuple[int, Stdout]:
    stdin = CountingStdin(lines)
    stdout = Stdout(stdin)
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", stdout)
    return main(argv), stdout


def test_score_streams_stdin_and_replaces_a_bad_byte_naming_the_line(untrained_model_dir, monkeypatch, capsys):
    from keras_transformer.cli.common import STDIN_CHUNK

    lines = [b"Amen.\tAmen.", b"Jesus wept.\tJesus weinte."] * 1250  # 2,500 pairs: three chunks
    lines[1201] = b"bad \xff\xfe bytes\tGott"
    status, stdout = run_streamed(monkeypatch, ["score", "--model-dir", untrained_model_dir], lines)
    assert status == 0, capsys.readouterr().err
    assert capsys.readouterr().err == (
        "keras-transformer: warning: stdin line 1202: invalid UTF-8 (byte 0xff at offset 4) replaced by U+FFFD\n"
    )
    printed = "".join(stdout.text).splitlines()
    assert len(printed) == len(lines) and printed[0] == printed[2] and printed[0] != printed[1]
    assert stdout.read_at_first_output == STDIN_CHUNK  # the first chunk scored before the rest is read


@pytest.mark.slow
def test_prefix_file_and_constraints_are_read_along_with_a_long_stdin(
    untrained_model_dir, tmp_path, monkeypatch, capsys
):
    from keras_transformer.cli.common import STDIN_CHUNK

    lines = [b"Amen.", b"Jesus wept."] * 550  # 1,100 lines: two chunks
    prefixes, constraints = tmp_path / "prefixes", tmp_path / "constraints"
    prefixes.write_text("Gott\n" * len(lines), encoding="utf-8")
    constraints.write_text("Amen\n" * len(lines), encoding="utf-8")
    argv = ["translate", "--model-dir", untrained_model_dir, "--beam-size", "2", "--prefix-file", str(prefixes)]
    status, stdout = run_streamed(monkeypatch, [*argv, "--constraints", str(constraints)], lines)
    assert status == 0, capsys.readouterr().err
    printed = "".join(stdout.text).splitlines()
    assert len(printed) == len(lines) and all(line.startswith("Gott") and "Amen" in line for line in printed)
    assert stdout.read_at_first_output == STDIN_CHUNK  # not all of stdin first
    prefixes.write_text("Gott\n", encoding="utf-8")  # short: said once the inputs are counted
    status, _ = run_streamed(monkeypatch, argv, lines)
    assert status == 2
    assert capsys.readouterr().err == (
        f"keras-transformer: error: --prefix-file {prefixes} has 1 lines for {len(lines)} inputs\n"
    )


# --- --checkpoint PATH of another model ----------------------------------------------------------------


def test_a_checkpoint_of_another_model_is_one_line_naming_the_missing_weights(untrained, tmp_path, capsys):
    """A checkpoint of a model with one layer a side, given to a model dir of two: every weight it
    has fits (same sizes), the second layers' are missing."""
    from keras_transformer.model import Transformer

    config = ModelDir(untrained).read()["model"]
    assert config.num_layers == 2
    shallow = Transformer(TransformerConfig.from_dict({**config.to_dict(), "num_layers": 1}))
    shallow.build()
    path = tf.train.Checkpoint(model=shallow).save(str(tmp_path / "other" / "ckpt"))
    assert main(["translate", "--model-dir", untrained, "--checkpoint", path, "Amen."]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    missing = len([w for w in shallow.weights if "/layer_0/" in w.path])  # the second layers: as many as the first
    assert line == (
        f"keras-transformer: error: cannot restore checkpoint {path}: it has no value for {missing} of the "
        f"model's {len(shallow.weights) + missing} weights (encoder/layer_1/self_attention/query/kernel, "
        "encoder/layer_1/self_attention/query/bias, encoder/layer_1/self_attention/key_value/kernel, "
        "encoder/layer_1/self_attention/key_value/bias, encoder/layer_1/self_attention/output/kernel and "
        f"{missing - 5} more): a checkpoint of another model?"
    )


def test_a_checkpoint_of_a_deeper_model_is_one_line_naming_the_weights_the_model_has_no_place_for(
    untrained, tmp_path, capsys
):
    """A checkpoint of a model with three layers a side, given to a model dir of two: every weight
    of the model has a value in it (same sizes), the third layers' have no place (issue 50, item 7:
    it translated with exit status 0 and no word). What a training checkpoint holds beside the
    weights (the optimizer's step and moments, the moving average of --ema-decay) is no mismatch."""
    from keras_transformer.keras_checkpoint import KerasCheckpoint
    from keras_transformer.model import Transformer
    from keras_transformer.training.optimization import compile_model

    config = ModelDir(untrained).read()["model"]
    assert config.num_layers == 2
    deep = Transformer(TransformerConfig.from_dict({**config.to_dict(), "num_layers": 3}))
    deep.build()
    path = tf.train.Checkpoint(model=deep).save(str(tmp_path / "deeper" / "ckpt"))
    assert main(["translate", "--model-dir", untrained, "--checkpoint", path, "Amen."]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    extra = len([w for w in deep.weights if "/layer_2/" in w.path])  # the third layers: as many as the first
    assert line == (
        f"keras-transformer: error: cannot restore checkpoint {path}: it holds {extra} weights that the model "
        f"({len(deep.weights) - extra} weights) has no place for (encoder/layer_2/self_attention/query_dense/_kernel, "
        "encoder/layer_2/self_attention/query_dense/bias, encoder/layer_2/self_attention/key_value_dense/_kernel, "
        "encoder/layer_2/self_attention/key_value_dense/bias, encoder/layer_2/self_attention/output_dense/_kernel "
        f"and {extra - 5} more): a checkpoint of another model?"
    )
    prefix = KerasCheckpoint(deep).write(str(tmp_path / "deeper" / "ckpt-1"))  # Keras' format (JAX, PyTorch)
    assert main(["translate", "--model-dir", untrained, "--checkpoint", prefix, "Amen."]) == 2
    assert capsys.readouterr().err == (
        f"keras-transformer: error: cannot restore checkpoint {prefix}: it holds {len(deep.weights)} weights, the "
        f"model has {len(deep.weights) - extra}: a checkpoint of another model?\n"
    )
    trained = compile_model(Transformer(config), TrainingConfig(ema_decay=0.99))
    trained.build()
    trained.optimizer.build(trained.trainable_variables)
    path = tf.train.Checkpoint(model=trained, optimizer=trained.optimizer).save(str(tmp_path / "same" / "ckpt"))
    assert main(["translate", "--model-dir", untrained, "--checkpoint", path, "--beam-size", "1", "Amen."]) == 0
    assert capsys.readouterr().err == ""


# --- export --check without LiteRT ------------------------------------------------------------------------


@pytest.mark.slow  # a TFLite conversion
def test_export_check_runs_the_tflite_model_on_tensorflows_interpreter_without_litert(untrained, tmp_path, monkeypatch):
    """What `make demo` meets on a fresh clone (no `export` extra): the TFLite model is checked all the
    same, with TensorFlow's own interpreter."""
    import functools

    from keras_transformer.config import DecodingConfig
    from keras_transformer.exporters.quality_check import check_quality
    from keras_transformer.exporters.signatures import IDS_SPEC, TranslationModule
    from keras_transformer.exporters.tensorflow import TFLITE_MODELS, tflite_decoding, tflite_metadata, tflite_models
    from keras_transformer.search.decoding import beam_search

    model, tokenizer, _ = load_model(untrained)
    decoding = DecodingConfig(beam_size=2)
    decode = functools.partial(beam_search, decoding=tflite_decoding(decoding))
    (flatbuffer,) = tflite_models(TranslationModule(model, decode=decode).translate_ids, IDS_SPEC)
    out = tmp_path / "export"
    out.mkdir()
    (out / TFLITE_MODELS["ids"]).write_bytes(flatbuffer)
    (out / "translator.json").write_text(json.dumps(tflite_metadata(model.config, decoding, [untrained])))
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # not installed
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    (report,), problems = check_quality(str(out), [untrained], sample=8)
    assert report.line().startswith(f"{out}/translator.tflite: 100% identical, BLEU ")  # a random model's BLEU: 0
    assert problems == []


# --- subword regularisation through train() ----------------------------------------------------------------


@pytest.mark.slow
def test_subword_alpha_reaches_the_training_batches_through_train(tmp_path):
    """Two runs of the same seed are the same run (with `subword_alpha` not passed on to the batches,
    these two were: measured); one with `subword_alpha` (segmentations sampled, Kudo, 2018) trains on
    other token sequences, so to other weights."""

    def weights(name: str, **data) -> list:
        from keras_transformer.training.trainer import train

        model_dir = str(tmp_path / name)
        train(model_dir, *tiny(2), DataConfig(data=str(FIXTURE), **data), verbose=0, log=lambda line: None)
        return [weight.numpy() for weight in load_model(model_dir)[0].weights]

    plain, sampled = weights("plain"), weights("sampled", subword_alpha=0.5)
    assert len(plain) > 20
    assert any(not np.array_equal(ours, theirs) for ours, theirs in zip(sampled, plain))


def test_weights_are_written_over_a_broken_state_file_which_is_rewritten(tmp_path, capsys):
    """best/ (or ema/, averaged/) whose state file a crash emptied: the next save writes, the state
    is whole again, and a reader warned once finds the newest checkpoint meanwhile."""
    from keras_transformer.model import Transformer
    from keras_transformer.model_dir.checkpoints import checkpoint_paths, save_weights

    model = Transformer(TransformerConfig.tiny(vocab_size=60, num_layers=1))
    model.build()
    best = str(tmp_path / "best")
    save_weights(model, best, 2, keep=2)
    (tmp_path / "best" / "checkpoint").write_bytes(b"")
    assert checkpoint_paths(best) == [f"{best}/ckpt-2"]
    assert capsys.readouterr().err.startswith(f"warning: {best}/checkpoint is unreadable: ")
    assert save_weights(model, best, 4, keep=2) == f"{best}/ckpt-4"
    assert checkpoint_paths(best) == [f"{best}/ckpt-4", f"{best}/ckpt-2"]
    assert capsys.readouterr().err == ""
