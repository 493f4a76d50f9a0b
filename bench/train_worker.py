"""One Keras backend's training steps in a process of its own, driven by `training.py backends` (never
run by hand).

    python bench/train_worker.py JOB.json

The job names the backend ("system": tensorflow, jax or torch), the workload and the steps. The
worker sets KERAS_BACKEND before Keras is imported, builds our model (`training.build_ours`:
`compile_model`, as `train` compiles it) and keras-hub's peer of the same shapes
(`peers.build_keras_hub`), warms both up on the workload's synthetic batch fed by `tf.data` (as
`train` feeds every backend), then answers {"ready": ...} with its peak memory so far; for every
"ours" or "keras_hub" line on stdin it times `steps` `model.fit` steps of that model and answers
their median seconds; "finish" ends it. Answers are JSON lines on stdout; whatever the libraries print goes to stderr.

XLA: JAX always jits its step (Keras' default there); TensorFlow jits with the job's `jit_compile`;
PyTorch runs eagerly (`torch.compile` has never run here: `training.backends.refusal`).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    os.environ["KERAS_BACKEND"] = job["system"]  # before keras is imported (by common, below)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    import keras
    from common import WORKLOADS, fit_steps, median, repeated, synthetic_batch
    from peers import build_keras_hub
    from training import build_ours

    backend = keras.backend.backend()
    assert backend == job["system"], (backend, job["system"])
    jit_compile = {"tensorflow": job["jit_compile"], "jax": True, "torch": False}[backend]
    workload = WORKLOADS[job["workload"]]
    dataset = repeated(synthetic_batch(workload))
    models = {"ours": build_ours(workload, jit_compile), "keras_hub": build_keras_hub(workload.config, jit_compile)}
    warmup_s = {}
    for name, model in models.items():
        start = time.perf_counter()
        fit_steps(model, dataset, job["warmup"])
        warmup_s[name] = round(time.perf_counter() - start, 1)
    answer(
        {
            "ready": True,
            "backend": backend,
            "backend_version": backend_version(backend),
            "jit_compile": {name: bool(model.jit_compile) for name, model in models.items()},
            "params": {name: model.count_params() for name, model in models.items()},
            "warmup_s": warmup_s,
            "max_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),  # KiB on Linux
        }
    )
    for line in sys.stdin:
        command = line.strip()
        if command == "finish":
            answer({"finished": True})
            return
        answer({"step_s": median(fit_steps(models[command], dataset, job["steps"]))})


def backend_version(backend: str) -> str:
    module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]
    return __import__(module).__version__


if __name__ == "__main__":
    main()
