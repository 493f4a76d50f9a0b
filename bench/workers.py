"""The benchmarks' worker processes, parent side: each system timed in a process of its own (its
threads, its libraries, no other system's state), started on a JOB.json and answering one JSON line
per request on its stdout. No TensorFlow here: a CTranslate2 worker's process imports this too."""

from __future__ import annotations

import json
import os
import subprocess


def without_wait_policy(env: dict[str, str]) -> dict[str, str]:
    """`env` without OpenMP's wait policy: CTranslate2 runs with its default threading, as its users
    run it (../shared/TF-FACTS.md: PASSIVE made it 2.9x slower)."""
    return {name: value for name, value in env.items() if name != "OMP_WAIT_POLICY"}


class Worker:
    """One system's process: `read()` its first answer (after its warm-up), then `ask(request)` for
    each next one. `command`: the worker program and its arguments, before the job file's path."""

    command: tuple[str, ...] = ()

    def __init__(self, job: dict, folder: str, env: dict[str, str]):
        self.name = job["system"]
        path = os.path.join(folder, f"{self.name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        self.process = subprocess.Popen(
            [*self.command, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: its worker exited with status {self.process.wait()} (its stderr above)")
        return json.loads(line)

    def ask(self, request: str) -> dict:
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
