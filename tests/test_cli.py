"""The command line end to end on the 400-pair fixture, and every bad input it must refuse."""

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURE, TINY_TRAINING
from conftest import run_cli as run

import keras_transformer
from keras_transformer.cli.main import main
from keras_transformer.cli.quiet import drop_native_logs

TINY = [*TINY_TRAINING, "--steps-per-epoch", "15"]


def run_here(capsys, *argv):
    """`main(argv)` in this process (no TensorFlow import to pay for): (status, stdout, stderr).
    Each subcommand also runs in a fresh process (`run`) in at least one test here."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_an_error_is_exactly_one_line_on_stderr(tmp_path):
    """TensorFlow is imported (the command runs) and says nothing: its native log lines are filtered."""
    result = run("translate", "--model-dir", str(tmp_path / "none"), "Jesus wept.")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"keras-transformer: error: no such model directory: {tmp_path / 'none'}\n"


@pytest.mark.slow  # two processes that import TensorFlow (~12 CPU-s) to see its log lines
def test_verbose_and_debug_let_tensorflow_log(tmp_path):
    for flags, env in ((["--verbose"], None), ([], {"KERAS_TRANSFORMER_DEBUG": "1"})):
        result = run("translate", *flags, "--model-dir", str(tmp_path / "none"), "hi", env=env)
        lines = result.stderr.splitlines()
        assert any(line.startswith(("I0000", "W0000", "E0000")) for line in lines), result.stderr
    assert lines[-1].endswith(f"ModelDirError: no such model directory: {tmp_path / 'none'}")  # the traceback


def test_version_and_help_answer_without_importing_tensorflow():
    assert run("--version").stdout == f"keras-transformer {keras_transformer.__version__}\n"
    probe = (
        "import sys\nfrom keras_transformer.cli.main import main\n"
        "for argv in (['--help'], ['train', '--help'], ['export', '--help'], ['--version']):\n"
        "    try:\n        main(argv)\n    except SystemExit as exit:\n        assert exit.code == 0\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules, file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stderr == "False False\n"
    assert "--verbose" in result.stdout and "--time-budget" in result.stdout


def test_native_log_messages_are_dropped_and_everything_else_kept():
    chunk = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        b"I0000 00:00:1796064519.732816    5328 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n"
        b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow.\n"
        b"E0000 00:00:1796064499.248611    5076 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n"
        b"F0000 00:00:1796064499.248611    5076 op.cc:1] Check failed: x\n"
        b"*** Check failure stack trace: ***\n"
    )
    kept, dropping = drop_native_logs(chunk)
    assert kept == chunk[chunk.index(b"F0000") :]
    assert not dropping
    ours = b"keras-transformer: error: x\n"
    assert drop_native_logs(ours + b"W0101 10:00:00.5 1 a.cc:2] y\n") == (ours, True)
    assert drop_native_logs(b"more of it\n", dropping=True) == (b"", True)  # a message carried over a read


def test_train_writes_a_complete_model_dir(trained):
    model_dir, result = trained.model_dir, trained  # conftest's `train --data FIXTURE TRAINED_FLAGS`
    assert sorted(os.listdir(model_dir)) == ["best", "checkpoints", "config.json", "logs", "tokenizer.model"]
    assert "step 30: validation BLEU" in result.stderr  # once, after epoch 2
    assert json.load(open(os.path.join(model_dir, "best", "bleu.json")))["step"] == 30
    assert os.path.exists(os.path.join(model_dir, "checkpoints", "ckpt-30.index"))
    config = json.load(open(os.path.join(model_dir, "config.json")))
    assert config["model"]["d_model"] == 64 and config["training"]["max_steps"] == 30
    # Progress as plain lines (stdout is a pipe): each epoch's end with its validation, no Keras bars.
    epoch_ends = [line.split(" | ")[0] for line in result.stdout.splitlines() if "val_loss" in line]
    assert epoch_ends == ["step 15/30", "step 30/30"]
    assert "Epoch" not in result.stdout and "\x1b" not in result.stdout and "\b" not in result.stdout
    assert result.stderr.startswith("keras-transformer: learned a 300-token subword vocabulary")  # no TensorFlow lines


@pytest.mark.slow
def test_training_again_resumes(trained, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    status, _, err = run_here(
        capsys, "train", "--data", str(FIXTURE), "--model-dir", model_dir, "--max-steps", "45", *TINY
    )
    assert status == 0, err
    assert "resumed from step 30" in err
    assert "trained to step 45" in err
    assert os.path.exists(os.path.join(model_dir, "checkpoints", "ckpt-45.index"))


def test_translate_arguments_and_stdin(trained, capsys, monkeypatch):
    model_dir = trained.model_dir
    status, out, err = run_here(
        capsys, "translate", "--model-dir", model_dir, "In the beginning God created the heavens.", "", "🦜 ∑"
    )
    assert status == 0, err
    lines = out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # one line per input; empty -> empty
    # stdin (in a fresh process: test_faults' streaming test, 2,100 lines of bytes)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"And God said\n\nJesus wept.\n")))
    status, out, err = run_here(capsys, "translate", "--model-dir", model_dir)
    assert status == 0, err
    lines = out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""


def test_decoding_commands_give_one_thread_per_op_before_tensorflow_starts(monkeypatch, capsys):
    """`translate` and `evaluate` set TensorFlow's intra-op pool (1 by default) unless
    $TF_NUM_INTRAOP_THREADS sets it; a TensorFlow already running keeps its pool, and says so if
    the flag asked for another."""
    import tensorflow as tf

    from keras_transformer.cli.common import use_op_threads
    from keras_transformer.cli.main import parser

    def flag(argv):  # the command's --intra-op-threads
        return parser().parse_args(argv).intra_op_threads

    set_to = []
    monkeypatch.setattr(tf.config.threading, "set_intra_op_parallelism_threads", set_to.append)
    for command in ("translate", "evaluate"):
        use_op_threads(flag([command, "--model-dir", "m"]))
        use_op_threads(flag([command, "--model-dir", "m", "--intra-op-threads", "0"]))
    assert set_to == [1, 0, 1, 0]
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "2")
    use_op_threads(flag(["translate", "--model-dir", "m"]))
    assert set_to == [1, 0, 1, 0]

    def running(threads):
        raise RuntimeError("Intra op parallelism cannot be modified after initialization.")

    monkeypatch.setattr(tf.config.threading, "set_intra_op_parallelism_threads", running)
    monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: 2)
    use_op_threads(flag(["translate", "--model-dir", "m", "--intra-op-threads", "2"]))
    assert capsys.readouterr().err == ""
    use_op_threads(flag(["translate", "--model-dir", "m", "--intra-op-threads", "1"]))
    assert capsys.readouterr().err == (
        "keras-transformer: warning: TensorFlow is running already: --intra-op-threads 1 not applied\n"
    )


@pytest.mark.slow
def test_evaluate_prints_sacrebleu_scores(trained):
    result = run("evaluate", "--model-dir", trained.model_dir, "--show", "1")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["sentences"] == 8
    import sacrebleu

    import keras_transformer as kt

    sources, references = kt.read_pairs(str(FIXTURE), "test")  # the split evaluate scores
    translations = kt.Translator.from_model_dir(trained.model_dir).translate(sources)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(translations, [references]).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(translations, [references]).score, 2)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert result.stdout.startswith("source:")


def test_translate_nbest(trained, capsys):
    argv = ["translate", "--model-dir", trained.model_dir, "--beam-size", "3", "--nbest", "2", "Jesus wept.", ""]
    status, out, err = run_here(capsys, *argv)
    assert status == 0, err
    fields = [line.split("\t") for line in out.splitlines()]
    assert [f[0] for f in fields] == ["0", "0", "1", "1"]  # INDEX<TAB>SCORE<TAB>TRANSLATION, 2 per input
    assert float(fields[0][1]) >= float(fields[1][1]) and fields[0][2] != fields[1][2]
    assert fields[2][1:] == ["0.0000", ""] == fields[3][1:]


# Slow (issue 50 item 10): `make test` holds `return_scores=True`'s numbers to the SavedModel's in
# tests/test_commands.py.
@pytest.mark.slow
def test_translate_scores_prints_a_json_line_per_input(trained, capsys):
    """`translate --scores`: one JSON line per input, the numbers of `Translator.translate(...,
    return_scores=True)` (`translation/confidence.py`); --nbest refused."""
    from keras_transformer.translation.translator import Translator

    texts = ["Jesus wept.", "", "Amen."]
    status, out, err = run_here(capsys, "translate", "--model-dir", trained.model_dir, "--scores", *texts)
    assert status == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    translator = Translator.from_model_dir(trained.model_dir)
    expected = translator.translate(texts, markup=True, split=True, return_scores=True)
    assert [line["translation"] for line in lines] == [found.translation for found in expected]
    assert [set(line) for line in lines] == [{"translation", "confidence", "words", "flags", "uncovered"}] * 3
    for line, found in zip(lines, expected):
        assert line["confidence"] == pytest.approx(found.confidence.score, abs=1e-4)
        assert [word for word, _ in line["words"]] == line["translation"].split()
    assert lines[1]["flags"] == ["empty"] and 0 < lines[0]["confidence"] <= 1
    status, _, err = run_here(capsys, "translate", "--model-dir", trained.model_dir, "--scores", "--nbest", "2", "a")
    assert status == 2 and "--scores scores the best translation of each input: drop --nbest" in err


@pytest.mark.slow
def test_average_then_evaluate_greedy_on_the_averaged_weights(trained, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    result = run("average", "--model-dir", model_dir, "--last", "2")
    assert result.returncode == 0, result.stderr
    assert "averaged the last 2 checkpoints into" in result.stderr and os.path.exists(
        os.path.join(model_dir, "averaged", "ckpt-30.index")
    )
    argv = ["evaluate", "--model-dir", model_dir, "--checkpoint", "averaged", "--beam-size", "1", "--alpha", "0"]
    status, out, err = run_here(capsys, *argv, "--show", "0")
    assert status == 0, err
    scores = json.loads(out)
    assert (scores["checkpoint"], scores["beam_size"], scores["alpha"], scores["sentences"]) == ("averaged", 1, 0.0, 8)
    assert scores["patience"] == 1.0  # the default stopping rule


@pytest.mark.slow
def test_patience_and_dtype_reach_the_translator(capsys, trained):
    argv = ["evaluate", "--model-dir", trained.model_dir, "--beam-size", "2", "--show", "0", "--limit", "3"]
    assert main([*argv, "--patience", "exact"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert (scores["patience"], scores["dtype"]) == (None, "float32")
    assert main([*argv, "--patience", "2", "--dtype", "bfloat16"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert (scores["patience"], scores["dtype"]) == (2.0, "bfloat16")


def test_nbest_above_the_beam_size_is_refused(capsys, trained):
    message = error_of(capsys, "translate", "--model-dir", trained.model_dir, "--beam-size", "2", "--nbest", "3", "hi")
    assert "nbest must be between 1 and the beam size 2, got 3" in message


def test_average_without_a_model_dir(capsys, tmp_path):
    assert "no such model directory" in error_of(capsys, "average", "--model-dir", str(tmp_path / "none"))


def error_of(capsys, *argv):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_missing_data_file(capsys, tmp_path):
    message = error_of(capsys, "train", "--data", str(tmp_path / "nope.tsv"), "--model-dir", str(tmp_path / "m"), *TINY)
    assert "no such data file" in message


def test_malformed_tsv_names_the_line(capsys, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\tein\ntwo zwei\n", encoding="utf-8")
    message = error_of(capsys, "train", "--data", str(bad), "--model-dir", str(tmp_path / "m"), *TINY)
    assert "bad.tsv:2: expected 2 tab-separated fields" in message


def test_unknown_preset(capsys, tmp_path):
    message = error_of(capsys, "train", "--data", str(FIXTURE), "--model-dir", str(tmp_path / "m"), "--preset", "huge")
    assert "unknown preset 'huge'" in message


def test_missing_model_dir(capsys, tmp_path):
    assert "no such model directory" in error_of(capsys, "translate", "--model-dir", str(tmp_path / "none"), "hi")


def test_model_dir_of_another_config_is_refused(capsys, trained, tmp_path):
    message = error_of(capsys, "train", "--data", str(FIXTURE), "--model-dir", trained.model_dir, "--preset", "small")
    assert "holds a model with another architecture" in message and "d_model: stored 64 != requested 128" in message


def test_model_dir_of_another_vocabulary_is_refused(capsys, trained):
    args = [a if a != "300" else "400" for a in TINY]  # --vocab-size 400
    message = error_of(capsys, "train", "--data", str(FIXTURE), "--model-dir", trained.model_dir, *args)
    assert "vocabulary learned for vocab_size 300, not 400" in message


def test_corrupt_checkpoint(capsys, trained, tmp_path):
    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    checkpoints = os.path.join(model_dir, "checkpoints")
    for name in os.listdir(checkpoints):
        if ".data-" in name:
            with open(os.path.join(checkpoints, name), "wb") as f:
                f.write(b"garbage")
    assert "cannot restore checkpoint" in error_of(capsys, "translate", "--model-dir", model_dir, "hi")


def test_corrupt_config(capsys, trained, tmp_path):
    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        f.write("{not json")
    assert "config.json is corrupt" in error_of(capsys, "evaluate", "--model-dir", model_dir)


def test_train_takes_the_presets_model_and_training_settings_and_flags_override_them(monkeypatch, tmp_path, capsys):
    from keras_transformer import TrainingConfig, TransformerConfig

    calls, unit = [], [None]
    monkeypatch.setattr(
        "keras_transformer.training.trainer.train",
        lambda model_dir, config, training, data, **_: calls.append((config, training)),
    )
    monkeypatch.setattr("keras_transformer.cli.flags.tensorflow_bfloat16", lambda: unit[0])
    main(["train", "--model-dir", str(tmp_path / "m"), "--preset", "small", "--time-budget", "30m"])
    long = dict(time_budget_s=1800.0, dropout_from_steps=9000)  # dropout where the budget buys 9,000 steps
    assert calls[-1] == (TransformerConfig.small(dropout=0.1), TrainingConfig.preset("small", **long))
    unit[0] = "amx_bf16"  # the same command on a CPU with AMX: wider, in bfloat16, and it says so
    main(["train", "--model-dir", str(tmp_path / "m"), "--preset", "small", "--time-budget", "30m"])
    assert calls[-1] == (
        TransformerConfig.small(d_model=256, d_ff=1024, dropout=0.1),
        TrainingConfig.preset("small", mixed_precision=True, **long),
    )
    assert (
        "keras-transformer: preset small, a budget of 30 minutes or more with AMX_BF16: dropout=0.1, d_model=256"
        in (capsys.readouterr().err)
    )
    unit[0] = None
    main(
        [
            "train",
            "--model-dir",
            str(tmp_path / "m"),
            "--preset",
            "small",
            "--batch-tokens",
            "4096",
            "--no-norm-first",
            "--dropout",
            "0.1",
        ]
    )
    config, training = calls[-1]
    assert training.batch_tokens == 4096 and training.fits_schedule_to_budget
    assert not config.norm_first and config.dropout == 0.1
    main(
        [
            "train",
            "--model-dir",
            str(tmp_path / "m"),
            "--num-layers",
            "2",
            "--d-model",
            "96",
            "--d-ff",
            "384",
            "--num-heads",
            "3",
        ]
    )
    assert calls[-1][0] == TransformerConfig.small(num_layers=2, d_model=96, d_ff=384, num_heads=3)
    main(["train", "--model-dir", str(tmp_path / "m"), "--preset", "base"])
    assert calls[-1] == (TransformerConfig.base(), TrainingConfig())  # the paper's Eq. 3, warmup_steps 4000


def test_train_keeps_a_presets_steps_seed_checkpoints_and_accumulation(monkeypatch, tmp_path):
    from keras_transformer import TrainingConfig, config

    recipe = dict(max_steps=70, seed=5, checkpoint_every=3, grad_accumulation=2)
    monkeypatch.setitem(config.PRESETS, "custom", config.Preset(model=dict(vocab_size=500), training=recipe))
    calls = []
    fake_train = lambda _dir, _config, training, *_, **__: calls.append(training)  # noqa: E731
    monkeypatch.setattr("keras_transformer.training.trainer.train", fake_train)
    main(["train", "--model-dir", str(tmp_path / "m"), "--preset", "custom"])
    assert calls == [TrainingConfig(**recipe)]


def test_data_flags_make_the_data_config(monkeypatch, tmp_path):
    from keras_transformer import DataConfig

    calls = []
    record = lambda model_dir, config, training, data, **_: calls.append((training, data))  # noqa: E731
    monkeypatch.setattr("keras_transformer.training.trainer.train", record)
    main(["train", "--model-dir", str(tmp_path / "m")])
    assert calls[-1][1] == DataConfig()
    flags = [
        "--data",
        "a.tsv,b.tsv",
        "--valid-data",
        "v.tsv",
        "--test-data",
        "tfds:x",
        "--reverse",
        "--valid-pairs",
        "7",
    ]
    flags += [
        "--tokenizer-sample",
        "9",
        "--tokenizer-model",
        "m.model",
        "--max-length-ratio",
        "3",
        "--tfds-data-dir",
        "d",
    ]
    main(["train", "--model-dir", str(tmp_path / "m"), *flags, "--bleu-sentences", "5"])
    training, data = calls[-1]
    assert (
        data
        == DataConfig(
            data="a.tsv,b.tsv",
            valid_data="v.tsv",
            test_data="tfds:x",
            reverse=True,
            valid_pairs=7,
            tokenizer_sample=9,
            tokenizer_model="m.model",
            max_length_ratio=3.0,
            tfds_data_dir="d",
        )
        and training.bleu_sentences == 5
    )


def test_evaluate_data_scores_the_whole_file(trained, capsys, tmp_path):
    data = tmp_path / "forty.tsv"
    data.write_text("".join(FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)[:40]), encoding="utf-8")
    argv = ["evaluate", "--model-dir", trained.model_dir, "--data", str(data), "--beam-size", "1", "--show", "0"]
    status, out, err = run_here(capsys, *argv)
    assert status == 0, err
    assert json.loads(out)["sentences"] == 40  # not a test split's 2% (of the fixture's 400: 8)


@pytest.mark.slow
def test_explicit_validation_and_test_files(tmp_path, capsys):
    lines = FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "train.tsv").write_text("".join(lines[:300]) + "\tan empty source\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("".join(lines[300:350]), encoding="utf-8")
    (tmp_path / "test.tsv").write_text("".join(lines[350:]), encoding="utf-8")
    model_dir = str(tmp_path / "model")
    data = ["--data", str(tmp_path / "train.tsv"), "--valid-data", str(tmp_path / "valid.tsv")]
    data += ["--test-data", str(tmp_path / "test.tsv")]
    status, _, err = run_here(
        capsys, "train", *data, "--valid-pairs", "20", "--model-dir", model_dir, "--max-steps", "30", *TINY,
        "--num-layers", "1",  # what is checked is the data, not the model: one layer halves the traces
    )  # fmt: skip
    assert status == 0, err
    read, skipped = map(
        int, re.search(r"training data: read (\d+) pairs, skipped (\d+): \2 with an empty side", err).groups()
    )
    assert read == skipped * 301  # one in every pass over the file
    stored = json.load(open(os.path.join(model_dir, "config.json")))["data_config"]
    assert (stored["valid_data"], stored["test_data"], stored["valid_pairs"]) == (data[3], data[5], 20)
    status, out, err = run_here(capsys, "evaluate", "--model-dir", model_dir, "--beam-size", "1", "--show", "0")
    assert status == 0, err
    assert json.loads(out)["sentences"] == 50  # all of test.tsv
