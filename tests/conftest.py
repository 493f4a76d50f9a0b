import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
from filelock import FileLock  # noqa: E402

DATA = pathlib.Path(__file__).parent / "data"
FIXTURE = DATA / "fixture_bible.en-de.tsv"
# A tiny model that trains in seconds on the fixture (the CLI and resume tests' `train` flags).
TINY_TRAINING = ["--preset", "tiny", "--vocab-size", "300", "--batch-tokens", "512", "--warmup-steps", "10"]
# The shared trained model (`trained`): 30 steps in 2 epochs of 15, validation BLEU after the second.
TRAINED_FLAGS = ["--max-steps", "30", "--bleu-every-epochs", "2", *TINY_TRAINING, "--steps-per-epoch", "15"]
# Every architecture option of `TransformerConfig` away from its default, as a Marian (OPUS-MT) model
# has them, with a 3-layer encoder, a 1-layer decoder and another LayerNorm epsilon.
ARCHITECTURE_OPTIONS = dict(
    num_encoder_layers=3,
    num_decoder_layers=1,
    ffn_activation="swish",
    sinusoid_layout="tensor2tensor",
    output_bias=True,
    start_from_zero_embedding=True,
    layer_norm_epsilon=1e-5,
)


# The files of most CPU seconds in `make test` and in `make test-slow` (KT_TEST_CPU's figures on the
# 2-core machine, 2026-12-01), heaviest first.
HEAVY_FILES = ("test_train_backends", "test_bench", "test_export", "test_readme", "test_notebooks", "test_constraints")
HEAVY_FILES += ("test_commands",)  # issue 50: the CLI export, and a train --backend torch process
HEAVY_FILES += ("test_faults",)
HEAVY_FILES += ("test_distribute", "test_ensemble", "test_resume", "test_workflows", "test_beam_search", "test_cli")
HEAVY_FILES += ("test_serving", "test_multilingual", "test_ctranslate2", "test_alignment", "test_backends")


def pytest_collection_modifyitems(items):
    """The heavy files first (a file's tests keep their order): with `--dist loadfile
    --no-loadscope-reorder` (the Makefile's) the workers start on the long files and end on short
    ones, instead of one worker running a long file alone at the end."""
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With KT_TEST_CPU=PATH, append one JSON line per test to PATH: its CPU seconds (this process's
    and its waited-for children's) for setup, call and teardown, which the machine's load does not
    inflate as it does wall time, its xdist worker and the wall-clock time it ended (how evenly the
    workers' loads end). A session or module fixture counts for the first test that uses it."""
    path = os.environ.get("KT_TEST_CPU")
    start = _cpu_seconds() if path else 0.0
    yield
    if path:
        with open(path, "a", encoding="utf-8") as f:
            found = {"test": item.nodeid, "cpu_s": round(_cpu_seconds() - start, 2)}
            found.update(worker=os.environ.get("PYTEST_XDIST_WORKER", "main"), ended=round(time.time(), 1))
            f.write(json.dumps(found) + "\n")


@pytest.fixture(autouse=True)
def _seed():
    import keras  # here, not at the top: xdist's controller loads this file and runs no test

    keras.utils.set_random_seed(0)


@pytest.fixture(scope="session")
def fixture_pairs():
    sources, targets = [], []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        source, target = line.split("\t")
        sources.append(source)
        targets.append(target)
    return sources, targets


@pytest.fixture(scope="session")
def tokenizer(fixture_pairs):
    from keras_transformer.data.tokenizer import SubwordTokenizer

    sources, targets = fixture_pairs
    return SubwordTokenizer.train(sources + targets, 400)


def run_cli(*args, stdin=None, env=None):
    """`python -m keras_transformer ARGS` in a fresh process, in the environment a user has (no
    TF_CPP_MIN_LOG_LEVEL, no KERAS_TRANSFORMER_DEBUG), plus `env`."""
    unset = ("TF_CPP_MIN_LOG_LEVEL", "KERAS_TRANSFORMER_DEBUG")
    env = {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """The model dir that `keras-transformer train --data FIXTURE TRAINED_FLAGS` wrote, and what it printed."""

    model_dir: str
    stdout: str
    stderr: str


def fingerprint(directory: pathlib.Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `directory`."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@contextlib.contextmanager
def shared_run(tmp_path_factory, name: str, make):
    """The directory `name` of this test run, whose `model` dir `make(root)` writes once (the first
    pytest-xdist worker, under a file lock; the others wait for it), yielded to be read only: a
    write into `model` fails the run. A test that writes into it copies it first (shutil.copytree)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above every worker's own
    root = base / name
    with FileLock(str(root) + ".lock"):
        if not (root / "fingerprint.json").exists():
            root.mkdir(exist_ok=True)
            make(root)
            (root / "fingerprint.json").write_text(json.dumps(fingerprint(root / "model")), encoding="utf-8")
    expected = json.loads((root / "fingerprint.json").read_text(encoding="utf-8"))
    message = f"a test wrote into the shared model dir {root / 'model'}"
    assert fingerprint(root / "model") == expected, message
    yield root
    assert fingerprint(root / "model") == expected, message


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A tiny model trained once per test run by the CLI, shared read-only by every test (`shared_run`)."""

    def make(root):
        result = run_cli("train", "--data", str(FIXTURE), "--model-dir", str(root / "model"), *TRAINED_FLAGS)
        assert result.returncode == 0, result.stderr
        (root / "stdout").write_text(result.stdout, encoding="utf-8")
        (root / "stderr").write_text(result.stderr, encoding="utf-8")

    with shared_run(tmp_path_factory, "trained", make) as root:
        printed = [(root / name).read_text(encoding="utf-8") for name in ("stdout", "stderr")]
        yield TrainedRun(str(root / "model"), *printed)


# A model that translates: a 1-layer tiny pre-LN model (the `small` preset's recipe) trained on the
# 32 shortest fixture pairs until it gives their references. Measured (2026-12-04, 2 cores): 200
# steps in ~10 CPU seconds; greedy search gives 30 of the 32 references exactly, sacreBLEU 94.5.
TRANSLATING_PAIRS = 32


@dataclasses.dataclass(frozen=True)
class TranslatingRun:
    """The model dir of `translating`, and the pairs it was trained on (and translates)."""

    model_dir: str
    sources: list[str]
    targets: list[str]


@pytest.fixture(scope="session")
def translating(tmp_path_factory):
    """A tiny model trained once per test run until it translates its training pairs (their
    outputs are not the noise of a 30-step model, so a change of outputs, e.g. by int8 weights,
    is a change of translations), shared read-only as `trained` is (`shared_run`)."""
    from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
    from keras_transformer.training.trainer import train

    def make(root):
        pairs = sorted(FIXTURE.read_text(encoding="utf-8").splitlines(), key=len)[:TRANSLATING_PAIRS]
        (root / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
        config = TransformerConfig.tiny(vocab_size=200, num_layers=1, dropout=0.0, norm_first=True, max_length=48)
        training = TrainingConfig(
            max_steps=200, steps_per_epoch=200, batch_tokens=512, warmup_fraction=0.1, learning_rate_scale=3.0,
            label_smoothing=0.0, shuffle_buffer=1000,
        )  # fmt: skip
        data = DataConfig(data=str(root / "pairs.tsv"), valid_data=str(root / "pairs.tsv"))
        train(str(root / "model"), config, training, data, verbose=0, log=lambda message: None)

    with shared_run(tmp_path_factory, "translating", make) as root:
        pairs = [line.split("\t") for line in (root / "pairs.tsv").read_text(encoding="utf-8").splitlines()]
        yield TranslatingRun(str(root / "model"), [s for s, _ in pairs], [t for _, t in pairs])


@dataclasses.dataclass(frozen=True)
class CliExport:
    """The SavedModels that `keras-transformer export --model-dir TRANSLATING --out OUT --no-tflite`
    wrote (`out`), and the {artifact: path} lines it printed."""

    out: str
    paths: dict[str, str]


@pytest.fixture(scope="session")
def cli_export(translating, tmp_path_factory):
    """`translating`'s export by the command line, in-process (`main`), without TFLite (its
    conversions are the slow tests'), once per test run, shared read-only as `trained` is (`shared_run`)."""
    import io

    from keras_transformer.cli.main import main

    def make(root):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = main(
                [
                    "export",
                    "--model-dir",
                    translating.model_dir,
                    "--out",
                    str(root / "model"),
                    "--no-tflite",
                    "--batching",
                ]
            )
        assert status == 0
        (root / "stdout").write_text(printed.getvalue(), encoding="utf-8")

    with shared_run(tmp_path_factory, "cli-export", make) as root:
        lines = (root / "stdout").read_text(encoding="utf-8").splitlines()
        yield CliExport(str(root / "model"), dict(line.split("\t") for line in lines))


@pytest.fixture(scope="session")
def scrambled_model():
    """A tiny untrained model over 12 tokens with large random weights: its choices vary from step
    to step, and EOS is likely enough that most searches end before their limit."""
    from keras_transformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.tiny(vocab_size=12, dropout=0.0, max_length=20))
    model.build()
    return scramble(model)


def scramble(model):
    """`model` with large random weights (but its layer norms'), so that an untrained model's
    choices vary from step to step."""
    import numpy as np

    rng = np.random.default_rng(1)
    for weight in model.weights:
        if "layer_norm" not in weight.path:
            weight.assign(rng.normal(scale=2.0, size=weight.shape) / np.sqrt(weight.shape[0]))
    return model


@pytest.fixture(scope="session")
def untrained_model_dir(tmp_path_factory, tokenizer):
    """A model dir with an untrained 1-layer tiny model (max_length 24) and the fixture's
    tokenizer, one checkpoint: for the command line and `Translator` tests that need a model dir
    but no training. Read-only."""
    import tensorflow as tf

    import keras_transformer as kt

    directory = kt.ModelDir(str(tmp_path_factory.mktemp("untrained") / "model"))
    config = kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, max_length=24)
    directory.write(config, kt.TrainingConfig(), "fixture", tokenizer)
    model = kt.Transformer(config)
    model.build()
    directory.checkpoint_manager(tf.train.Checkpoint(model=model)).save(checkpoint_number=1)
    return directory.path


# --- one pair repeated, trained on one device (test_faults, test_distribute) ---------------------

# `train` on one sentence pair repeated, without dropout: every batch is the same whatever its size or
# order, so another run that must end alike (a resumed one, one on 2 replicas) can be compared with it.
ONE_PAIR_FLAGS = ["--preset", "tiny", "--num-layers", "1", "--vocab-size", "60", "--dropout", "0"]
ONE_PAIR_FLAGS += ["--batch-tokens", "512", "--warmup-steps", "2", "--max-steps", "4", "--steps-per-epoch", "2"]
ONE_PAIR_FLAGS += ["--tokenizer-sample", "200"]


@dataclasses.dataclass(frozen=True)
class OnePairRun:
    """The data, model dir and output (stdout then stderr) of `train --data DATA ONE_PAIR_FLAGS`."""

    data: str
    model_dir: str
    output: str


@pytest.fixture(scope="session")
def one_pair_run(tmp_path_factory):
    """`keras-transformer train --data ONE_PAIR ONE_PAIR_FLAGS` (4 steps, 2 epochs) run once per test
    run, in-process (`main`), shared read-only as `trained` is (`shared_run`)."""
    import io

    from keras_transformer.cli.main import main

    def make(root):
        pair = FIXTURE.read_text(encoding="utf-8").splitlines()[5]
        (root / "one-pair.tsv").write_text((pair + "\n") * 200, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(
                ["train", "--data", str(root / "one-pair.tsv"), "--model-dir", str(root / "model"), *ONE_PAIR_FLAGS]
            )
        assert status == 0, err.getvalue()[-3000:]
        (root / "output").write_text(out.getvalue() + err.getvalue(), encoding="utf-8")

    with shared_run(tmp_path_factory, "one-pair", make) as root:
        yield OnePairRun(str(root / "one-pair.tsv"), str(root / "model"), (root / "output").read_text(encoding="utf-8"))
