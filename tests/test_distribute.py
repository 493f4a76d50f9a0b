"""Strategies: one device and MirroredStrategy agree (uneven batches, first or later, included), two local workers
under MultiWorkerMirroredStrategy end with identical weights, and XLA is refused where it fails.

Logical CPU devices and TF_CONFIG must be set before TensorFlow starts: those runs are
subprocesses, each bounded by a timeout."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE, ONE_PAIR_FLAGS

from keras_transformer.training.distribute import check_jit_compile, resolve_strategy, tf_config_workers

HERE = os.path.dirname(__file__)
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
TIMEOUT_S = 600


# the batch of 5 splits 3 + 2 after an even first batch: the logged loss is right; an uneven first
# batch: Keras' symbolic build no longer fails on it. Both in one process (fresh models for each).
PARITY_SIZES = ("4,5,4", "5,4,4")


@pytest.mark.slow
def test_transformer_on_two_cpu_devices_matches_one_device():
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "replica_parity.py"), "mirrored", *PARITY_SIZES],
        capture_output=True, text=True, env=ENV, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.strip().splitlines()[-len(PARITY_SIZES) :]]
    print(reports)
    assert [report["sizes"] for report in reports] == list(PARITY_SIZES)
    for report in reports:
        assert report["replicas"] == 2 and report["steps"] == [3, 3], report
        assert report["max_loss_difference"] < 1e-5, report
        assert report["max_weight_difference"] < 1e-5, report
        assert report["max_weight_change"] > 1e-2, report  # the weights did move


def test_auto_is_the_default_strategy_on_one_cpu(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert resolve_strategy("auto") is tf.distribute.get_strategy()
    assert isinstance(resolve_strategy("one-device"), tf.distribute.OneDeviceStrategy)


def test_tf_config_workers(monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})
    )
    assert tf_config_workers() == 2
    monkeypatch.delenv("TF_CONFIG")
    assert tf_config_workers() == 0
    with pytest.raises(ValueError, match="needs TF_CONFIG"):
        resolve_strategy("multi-worker")
    with pytest.raises(ValueError, match="unknown strategy 'nccl'"):
        resolve_strategy("nccl")


def test_jit_compile_is_refused_for_several_cpu_replicas():
    class TwoCpuReplicas:  # what check_jit_compile reads of a MirroredStrategy on 2 logical CPUs
        num_replicas_in_sync = 2

        class extended:
            worker_devices = (
                "/job:localhost/replica:0/task:0/device:CPU:0",
                "/job:localhost/replica:0/task:0/device:CPU:1",
            )

    with pytest.raises(ValueError, match="XLA cannot read a variable placed on another CPU device"):
        check_jit_compile(TwoCpuReplicas())
    check_jit_compile(tf.distribute.get_strategy())  # one device: allowed


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_two_workers_train_as_one_worker_on_the_same_global_batches(one_pair_run, tmp_path):
    """Two workers (`--strategy multi-worker`, two local processes) end with identical weights, as
    their all-reduce makes them by construction; what proves the training right is one worker:
    conftest's `one_pair_run`, the same command on one device. Its data is one pair repeated and
    dropout is off, so every global batch is the same whatever its split, and the workers' losses
    must be its own, to the 3 decimals printed, and their weights move alike (as in the test below)."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    args = ["train", "--data", one_pair_run.data, *ONE_PAIR_FLAGS, "--strategy", "multi-worker"]
    args += ["--collective-timeout", "120"]
    processes = []
    start = time.monotonic()
    try:
        for index in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            log = open(tmp_path / f"worker{index}.log", "w")
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "keras_transformer", *args, "--model-dir", str(tmp_path / f"worker{index}")],
                env={**ENV, "TF_CONFIG": json.dumps(tf_config)}, stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        codes = [p.wait(timeout=TIMEOUT_S) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    elapsed = time.monotonic() - start
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    print(f"multi-worker run time: {elapsed:.1f} s")
    assert all("training on 2 replica(s) with CollectiveAllReduceStrategy" in log for log in logs)
    chief = tf.train.load_checkpoint(str(tmp_path / "worker0" / "checkpoints" / "ckpt-4"))
    other = tf.train.load_checkpoint(str(tmp_path / "worker1" / "checkpoints" / "worker-1" / "ckpt-4"))
    names = [n for n in chief.get_variable_to_shape_map() if n.endswith("VARIABLE_VALUE")]  # model and optimizer
    assert len(names) > 20
    for name in names:
        np.testing.assert_array_equal(chief.get_tensor(name), other.get_tensor(name), err_msg=name)
    logged = [re.findall(r"\b(val_loss|loss) (\d+\.\d+)", output) for output in (one_pair_run.output, logs[0])]
    assert len(logged[0]) >= 4 and logged[1] == logged[0]
    one = tf.train.load_checkpoint(f"{one_pair_run.model_dir}/checkpoints/ckpt-4")
    close = [np.allclose(chief.get_tensor(n), one.get_tensor(n), rtol=1e-3, atol=2e-3) for n in names]
    assert sum(close) >= 0.95 * len(names)


@pytest.mark.slow
def test_train_on_two_cpu_devices_equals_one_device(one_pair_run, tmp_path):
    """`keras-transformer train --strategy mirrored --cpu-devices 2` (a process of its own) logs the
    losses of one device (conftest's `one_pair_run`, the same command without those flags): the
    data is one pair repeated and dropout is off, so every batch has the same per-token loss
    whatever its size, and the replicas' shares must add up to it (a replica weighted wrongly
    moved the logged loss by ~0.1). The losses of every step and of validation,
    to the 3 decimals printed; the weights move alike (Adam's sign for a ~0 gradient aside, which
    summation order can flip)."""
    command = [sys.executable, "-m", "keras_transformer", "train", "--model-dir", str(tmp_path / "two")]
    command += ["--data", one_pair_run.data, *ONE_PAIR_FLAGS, "--strategy", "mirrored", "--cpu-devices", "2"]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = {"one": one_pair_run.output, "two": result.stdout + result.stderr}
    logged = {name: re.findall(r"\b(val_loss|loss) (\d+\.\d+)", output) for name, output in outputs.items()}
    assert "training on 2 replica(s) with MirroredStrategy" in result.stderr
    assert "training on 1 replica(s)" in one_pair_run.output
    assert len(logged["one"]) >= 4 and logged["two"] == logged["one"]
    one = tf.train.load_checkpoint(f"{one_pair_run.model_dir}/checkpoints/ckpt-4")
    two = tf.train.load_checkpoint(str(tmp_path / "two" / "checkpoints" / "ckpt-4"))
    names = sorted(set(one.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"})
    assert names == sorted(set(two.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"})
    close = [np.allclose(two.get_tensor(n), one.get_tensor(n), rtol=1e-3, atol=2e-3) for n in names]
    assert len(names) > 20 and sum(close) >= 0.95 * len(names)
