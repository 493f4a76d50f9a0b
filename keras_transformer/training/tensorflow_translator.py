"""The validation BLEU on JAX and PyTorch (issue 38). `BleuCallback` translates with the beam search
of `search/` (§6.1), which is TensorFlow's: it runs only a model on Keras' TensorFlow backend, and
Keras runs one backend per process. So a TensorFlow process translates for the run: started at the
first BLEU and kept for the next ones (its model built and its search traced once), it reads the
run's current weights from a Keras weights file (`keras_checkpoint`) at every call and answers with
the translations of `Translator(model, tokenizer)`, those of a TensorFlow run with the same weights.

It runs on the CPU (`tensorflow_process`), in a session of its own (a Ctrl-C in the terminal reaches
the run, whose `StopOnSignal` ends it cleanly, not the translating process), and ends when the run
closes it or when its stdin closes (the run ended, however it ended, `kill -9` included), and
removes the weights file as it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from keras_transformer.keras_checkpoint import KerasCheckpoint, tensorflow_process

STDERR_TAIL = 2000  # characters of the process's stderr in an error
TEMPORARY_PREFIX = "keras-transformer-bleu-"  # of the process's directory, in TMPDIR


class TensorFlowTranslator:
    """`translate(texts)` as `Translator(model, tokenizer).translate` (beam search with the default
    `DecodingConfig`: beam 4, alpha 0.6) for a `model` on JAX or PyTorch, with its weights at the call;
    `tokenizer_path`: its tokenizer's model file. `close()` ends the TensorFlow process."""

    def __init__(self, model, tokenizer_path: str):
        self.model = model
        self.tokenizer_path = tokenizer_path
        self._process = None
        self._directory = None  # the weights file and the process's stderr
        self._stderr = None

    def translate(self, texts: Sequence[str]) -> list[str]:
        if self._process is None:
            self._start()
        prefix = KerasCheckpoint(self.model).write(os.path.join(self._directory, "weights"))
        answer = ""
        with contextlib.suppress(BrokenPipeError):  # the process ended: said below
            self._process.stdin.write(json.dumps({"weights": prefix, "texts": list(texts)}) + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
        if not answer:
            self._stderr.seek(0)
            tail = self._stderr.read()[-STDERR_TAIL:].strip()
            self.close()
            raise RuntimeError(f"the TensorFlow process translating for the validation BLEU ended: {tail}")
        return json.loads(answer)

    def _start(self) -> None:
        self._directory = tempfile.mkdtemp(prefix=TEMPORARY_PREFIX)
        self._stderr = open(os.path.join(self._directory, "stderr"), "w+", encoding="utf-8")
        config = json.dumps(self.model.config.to_dict())
        command, env = tensorflow_process(__name__, config, self.tokenizer_path, self._directory)
        self._process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )

    def close(self) -> None:
        """End the TensorFlow process (after the call in flight) and remove its files; the next
        `translate` starts another."""
        if self._process is None:
            return
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()
        self._stderr.close()
        shutil.rmtree(self._directory, ignore_errors=True)
        self._process = self._directory = self._stderr = None


def main(argv: list[str]) -> None:
    """The translating process (`python -m keras_transformer.training.tensorflow_translator CONFIG
    TOKENIZER DIRECTORY`): a JSON line in ({"weights": prefix, "texts": [...]}), a JSON line out (the
    translations), on the stdout it was started with; whatever else prints goes to stderr. It
    removes `DIRECTORY` (the weights file's) when its stdin closes, since a run ended by `kill -9`
    cannot. It imports TensorFlow's tools here, not at the top: the run's own process imports this
    module on JAX or PyTorch."""
    config, tokenizer_path, directory = argv
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from keras_transformer.config import TransformerConfig
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.model import Transformer
    from keras_transformer.translation.translator import Translator

    model = Transformer(TransformerConfig.from_dict(json.loads(config)))
    model.build()
    translator = Translator(model, SubwordTokenizer.load(tokenizer_path))
    try:
        with contextlib.suppress(BrokenPipeError):
            for line in sys.stdin:
                request = json.loads(line)
                KerasCheckpoint(model).read(request["weights"])
                print(json.dumps(translator.translate(request["texts"])), file=answers, flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
