"""Smoke test of the benchmarks in bench/: each runs for one step on a tiny model and prints one
valid JSON line. Speed itself is measured by the benchmarks, never here."""

import json
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

# Tiny benchmark runs in this process. Tracing dominates: a decode runner takes seconds, a
# training benchmark ~15 s per model and input shape traced (pre-building the optimizer does not
# shorten it), so each runs the fewest shapes and steps that exercise its code.
pytestmark = pytest.mark.slow


def run_main(module_name, argv, capsys):
    module = __import__(module_name)
    module.main(argv)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    line = json.loads(lines[0])
    assert line["machine"]["cores"] >= 1 and line["versions"]["tensorflow"]
    return line


def test_model_flops_match_the_issue_figures():
    from common import WORKLOADS
    from flops import model_flops_per_step

    medium = WORKLOADS["medium"]
    # 6 x 7,553,024 weights x 2048 tokens + 12 x 3 x 64 x 256 x 3 x 32^2 attention FLOPs
    assert model_flops_per_step(medium.config, 64, 32, 32) == 6 * 7_553_024 * 2048 + 12 * 3 * 64 * 256 * 3 * 32**2


def test_train_throughput(capsys):
    line = run_main(
        "train_throughput", ["--workload", "tiny", "--steps", "1", "--warmup", "1", "--ceiling-size", "256"], capsys
    )
    assert line["tgt_tokens_per_s"] > 0 and 0 < line["mfu"] < 1
    assert line["achieved_gflops"] == pytest.approx(
        line["model_flops_per_step"] / line["step_s_median"] / 1e9, rel=0.01
    )


DECODE_WORK = ["--workload", "tiny", "--sentences", "2", "--source-length", "3", "--generate", "2", "--repeats", "1"]
PEER_PACKAGES = {"tflite": "ai_edge_litert", "keras_hub": "keras_hub", "keras_hub_xla": "keras_hub"}


@pytest.mark.parametrize("runner", ["python", "keras_hub"])
def test_decode_throughput_greedy(runner, capsys):
    if runner in PEER_PACKAGES:
        pytest.importorskip(PEER_PACKAGES[runner], reason=f"{PEER_PACKAGES[runner]} (an extra) is not installed")
    line = run_main("decode_throughput", DECODE_WORK + ["--runner", runner, "--search", "greedy"], capsys)
    assert (
        line["runner"] == runner and line["generated_tokens"] == 2 and line["beam_size"] == 1 and line["alpha"] is None
    )
    assert line["tgt_tokens_per_s"] > 0 and line["batch1_latency_s"] > 0


def test_decode_compare_runs_every_runner_on_one_model(capsys):
    """Every runner's beam search in one process (one model, one trace each): cheaper than one
    `decode_throughput` call per runner, and the same code paths."""
    for package in set(PEER_PACKAGES.values()):
        pytest.importorskip(package, reason=f"{package} (an extra) is not installed")
    runners = [
        "python",
        "xla",
        "savedmodel",
        "python_bfloat16",
        "savedmodel_bfloat16",
        "tflite",
        "keras_hub",
        "keras_hub_xla",
    ]
    argv = DECODE_WORK + ["--search", "beam", "--beam-size", "2", "--runners", *runners, "--rounds", "1"]
    line = run_main("decode_compare", argv, capsys)
    assert set(line["systems"]) == set(runners) and line["reference"] == "python"
    for runner in runners[1:]:
        assert line["speedup_of_reference_batch"][runner]["of_medians"] > 0


def test_ctranslate2_compare_forced_work(capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 (an extra) is not installed")
    runners = ["python", "ctranslate2", "ctranslate2_int8"]
    argv = ["forced", *DECODE_WORK, "--beam-size", "2", "--runners", *runners, "--rounds", "1"]
    line = run_main("ctranslate2_compare", argv, capsys)
    assert line["workload"] == "tiny" and line["search"] == "beam" and set(line["systems"]) == set(runners)
    assert all(system["generated_tokens"] == 2 for system in line["systems"].values())
    assert line["systems"]["ctranslate2"]["runner_package"].startswith("ctranslate2==")


def test_ctranslate2_compare_verses(capsys, tmp_path):
    pytest.importorskip("ctranslate2", reason="ctranslate2 (an extra) is not installed")
    from conftest import FIXTURE

    from keras_transformer import TrainingConfig, TransformerConfig
    from keras_transformer.training.trainer import train

    model_dir = str(tmp_path / "model")
    training = TrainingConfig(max_steps=1, batch_tokens=512, steps_per_epoch=1)
    train(model_dir, TransformerConfig.tiny(vocab_size=300), training, str(FIXTURE), verbose=0, log=lambda _: None)
    argv = ["verses", "--model-dir", model_dir, "--limit", "3", "--beam-size", "2", "--rounds", "1"]
    argv += ["--savedmodel", "--exact", "--bfloat16"]
    line = run_main("ctranslate2_compare", argv, capsys)
    ours = {
        "ours",
        "ours_savedmodel",
        "ours_exact",
        "ours_savedmodel_exact",
        "ours_bfloat16",
        "ours_savedmodel_bfloat16",
    }
    assert set(line["systems"]) == {*ours, "ctranslate2", "ctranslate2_int8"}
    assert line["sentences"] == 3
    for system in line["systems"].values():
        assert system["target_tokens"] > 0 and system["tgt_tokens_per_s"] > 0 and 0 <= system["bleu"] <= 100
    assert line["relative_to_ctranslate2"]["ctranslate2"] == 1.0
    assert line["systems"]["ours"]["target_tokens"] == line["systems"]["ours_savedmodel"]["target_tokens"]


def test_search_steps_counts_the_work_of_each_stopping_rule(capsys, tmp_path):
    from conftest import FIXTURE

    from keras_transformer import TrainingConfig, TransformerConfig
    from keras_transformer.training.trainer import train

    model_dir = str(tmp_path / "model")
    training = TrainingConfig(max_steps=1, batch_tokens=512, steps_per_epoch=1)
    train(model_dir, TransformerConfig.tiny(vocab_size=300), training, str(FIXTURE), verbose=0, log=lambda _: None)
    line = run_main("search_steps", ["--model-dir", model_dir, "--limit", "3", "--beam-size", "2"], capsys)
    for counts in line["rules"].values():  # 3 sentences x 2 hypotheses at most, per step
        assert 0 < counts["decoder_steps"] * 2 <= counts["hypothesis_steps"] <= counts["decoder_steps"] * 2 * 3
    exact, patience = line["rules"]["exact"], line["rules"]["patience_1"]
    ratio = exact["hypothesis_steps"] / patience["hypothesis_steps"]
    assert line["exact_over_patience_1"]["hypothesis_steps"] == round(ratio, 3)


def test_compare(capsys):
    pytest.importorskip("keras_hub", reason="keras-hub is in the `bench` extra, not installed")
    line = run_main(
        "compare",
        ["--workload", "tiny", "--rounds", "1", "--steps", "1", "--warmup", "1", "--ceiling-size", "256"],
        capsys,
    )
    assert set(line["systems"]) == {"ours", "keras_hub"} and line["speedup_ours_over_keras_hub"] > 0


def test_seed_parallelism(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the `bench` extra, not installed")
    png = tmp_path / "plot.png"
    argv = [
        "--workload",
        "tiny",
        "--lengths",
        "4",
        "--tokens",
        "8",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--lstm-units",
        "8",
    ]
    line = run_main("seed_parallelism", argv + ["--plot", str(png)], capsys)
    assert [row["length"] for row in line["rows"]] == [4] and png.stat().st_size > 0


def test_input_pipeline(capsys):
    from conftest import FIXTURE

    argv = ["--data", str(FIXTURE), "--batches", "2", "--warmup", "1", "--tokenizer-sample", "400"]
    line = run_main("input_pipeline", argv, capsys)
    assert line["tgt_tokens_per_s"] > 0 and line["cores_for_1m_tgt_tokens_per_s"] > 0 and line["max_length"] == 256


def test_data_memory(capsys, tmp_path):
    import data_memory
    from conftest import FIXTURE

    data_memory.main(["--make-tsv", str(tmp_path / "big.tsv"), "--lines", "3"])
    assert (tmp_path / "big.tsv").read_text(encoding="utf-8").splitlines()[2].endswith(" #2")
    line = run_main("data_memory", ["--data", str(FIXTURE), "--steps", "1"], capsys)
    run = line["runs"][str(FIXTURE)]
    assert run["peak_rss_mb"] > 100 and 0 < run["first_step_s"] < run["total_s"]


def test_profile_decode(capsys, tmp_path):
    line = run_main(
        "profile_decode",
        ["--model", "tiny", "--batch", "2", "--source-length", "5", "--generate", "3", "--logdir", str(tmp_path)],
        capsys,
    )
    assert line["ms_per_step"] > 0 and line["target_tokens_per_s"] > 0
    assert any("MatMul" in name for name in line["op_self_time_ms_per_step"])
    assert 0 < sum(line["op_self_time_share"].values()) <= 1.0 + 1e-6


def test_score_compare(capsys, tmp_path):
    pytest.importorskip("ctranslate2", reason="ctranslate2 (an extra) is not installed")
    from conftest import FIXTURE

    from keras_transformer import TrainingConfig, TransformerConfig
    from keras_transformer.training.trainer import train

    model_dir = str(tmp_path / "model")
    training = TrainingConfig(max_steps=1, batch_tokens=512, steps_per_epoch=1)
    train(model_dir, TransformerConfig.tiny(vocab_size=300), training, str(FIXTURE), verbose=0, log=lambda _: None)
    line = run_main("score_compare", ["--model-dir", model_dir, "--limit", "3", "--rounds", "1"], capsys)
    assert line["pairs"] == 3 and set(line["systems"]) == {"ours", "ctranslate2"}
    assert all(system["pairs_per_s"] > 0 for system in line["systems"].values())
    assert 0 <= line["max_abs_log_prob_difference"] < 1.0
