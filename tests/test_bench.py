"""Smoke test of the benchmarks in bench/: each runs for one step on a tiny model and prints one
valid JSON line. Speed itself is measured by the benchmarks, never here."""

import json
import pathlib
import re
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

# Tiny benchmark runs in this process. Tracing dominates: a decode runner takes seconds, a
# training benchmark ~8 CPU-s per model and input shape traced (`compile_model` builds the model
# and its optimizer first: ~17 s when the first step creates the variables), and a
# process of its own ~5 CPU-s to import TensorFlow, so each runs the fewest shapes, steps and
# processes that exercise its code. A test that runs a benchmark is `slow` (`make test-slow`); the
# checks of its arithmetic and settings are not.


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


@pytest.mark.slow
def test_train_throughput(capsys):
    argv = ["throughput", "--workload", "tiny", "--steps", "1", "--warmup", "1", "--ceiling-size", "256"]
    line = run_main("training", argv, capsys)
    assert line["tgt_tokens_per_s"] > 0 and 0 < line["mfu"] < 1
    assert line["achieved_gflops"] == pytest.approx(
        line["model_flops_per_step"] / line["step_s_median"] / 1e9, rel=0.01
    )


@pytest.mark.slow
def test_gpu_check_is_train_throughput_with_the_gpu_settings():
    """gpu_check.sh's dry run on a CPU: MirroredStrategy on the one device, mixed precision (bf16
    here), XLA; MFU against the matmul rate in the compute dtype."""
    import os
    import subprocess

    env = {**os.environ, "PYTHON": sys.executable, "WORKLOAD": "tiny", "BATCH": "4", "LENGTH": "8", "STEPS": "1"}
    env["CEILING"] = "256"
    out = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], env=env, capture_output=True, text=True, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["benchmark"] == "train_throughput" and line["jit_compile"] and line["replicas"] == 1
    assert line["policy"] == "mixed_bfloat16" and line["matmul_ceiling_dtype"] == "bfloat16"
    assert line["batch"] == [4, 8, 8] and 0 < line["mfu"] < 1


DECODE_WORK = ["--workload", "tiny", "--sentences", "2", "--source-length", "3", "--generate", "2", "--repeats", "1"]


class InProcessWorker:
    """`decoding.Worker` served in this process by `decode_worker`'s `Forced` or `Verses`, the
    job and every answer through JSON as through the worker's pipe: for the tests of what the
    workers compute, not of their processes (each worker's TensorFlow import costs ~5 CPU-s).
    test_decoding_forced_runs_every_runner_in_its_own_process runs the real processes."""

    def __init__(self, job: dict, folder: str, env: dict[str, str]):
        import decode_worker

        self.name = job["system"]
        job = json.loads(json.dumps(job))
        self.work = {"forced": decode_worker.Forced, "verses": decode_worker.Verses}[job["mode"]](job)

    def read(self) -> dict:
        return json.loads(json.dumps({"ready": True, **self.work.ready}))

    def ask(self, command: str) -> dict:
        return json.loads(json.dumps({"round": self.work.round, "finish": self.work.finish}[command]()))

    def close(self) -> None:
        pass


@pytest.fixture
def in_process_workers(monkeypatch):
    import decoding

    monkeypatch.setattr(decoding, "Worker", InProcessWorker)


def test_bench_reads_held_out_pairs_through_the_package_reader(tmp_path):
    """Weighted sources (no file name), a reversed model, a multilingual model's tagged sources: what
    `keras_transformer.model_dir.held_out` reads, never `read_pairs` of the spec re-derived."""
    from common import held_out_pairs
    from test_held_out import model_dir

    from keras_transformer.data.sources import read_pairs

    weighted = held_out_pairs(model_dir(tmp_path, data="bible-en-de:0.3,software-en-de:0.7"), 3)
    assert (weighted.sources, weighted.references) == read_pairs("bible-en-de", "test", limit=3)
    (tmp_path / "reversed").mkdir()
    reversed_ = held_out_pairs(model_dir(tmp_path / "reversed", data="bible-en-de", reverse=True), 3)
    assert (reversed_.references, reversed_.sources) == read_pairs("bible-en-de", "test", limit=3)
    (tmp_path / "multi").mkdir()
    multilingual = held_out_pairs(model_dir(tmp_path / "multi", data="bible-en-de,bible-en-fr"), 3)
    english = read_pairs("bible-en-de", "test", limit=3)[0]
    assert multilingual.sources == [f"<2de> {text}" for text in english]
    import inspect

    import decoding
    import quality

    readers = [decoding.verses_fields, decoding.search_steps, decoding.threads, decoding.controls_cost]
    readers += [quality.score_compare, quality.alignment_names, quality.constraints, quality.casing]
    readers += [quality.paragraphs, quality.glossary, quality.unknown]
    sources = {reader.__name__: inspect.getsource(reader) for reader in readers}
    assert [name for name, source in sources.items() if "read_pairs(" in source] == []
    assert all("held_out_pairs(" in source for source in sources.values())


def test_translate_memory_pipes_the_bibles_english_verses():
    import data

    lines = data.english_lines(3)
    assert lines[0] == "In the beginning God created the heavens and the earth."
    assert len(lines) == 3 and all(len(line) > 20 and "\t" not in line for line in lines)


def test_no_bench_or_package_file_sets_omp_wait_policy():
    """CTranslate2 runs with OpenMP's default wait policy: a passive one makes it ~3x slower."""
    root = BENCH.parent
    setting = re.compile(r"OMP_WAIT_POLICY\s*=|OMP_WAIT_POLICY[\"']\s*(\]\s*=|[,:])|putenv\(\s*[\"']OMP_WAIT_POLICY")
    files = [*BENCH.rglob("*.py"), *BENCH.rglob("*.sh"), *(root / "keras_transformer").rglob("*.py")]
    assert len(files) > 20
    offenders = [str(path) for path in files if setting.search(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_decode_workers_get_no_wait_policy_and_the_isa_caps(monkeypatch):
    import decoding

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    native = decoding.child_environment("native")
    assert (
        "OMP_WAIT_POLICY" not in native
        and "ONEDNN_MAX_CPU_ISA" not in native
        and native["XLA_FLAGS"] == ("--xla_dump_to=/tmp/x")
    )
    avx2 = decoding.child_environment("avx2")
    assert "OMP_WAIT_POLICY" not in avx2
    assert avx2["ONEDNN_MAX_CPU_ISA"] == "AVX2" and avx2["CT2_FORCE_CPU_ISA"] == "AVX2"
    assert avx2["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"  # CTranslate2's matmuls on Intel CPUs
    assert avx2["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2"
    assert decoding.isa_label("avx2", ["avx2", "avx512f"]) == "AVX2 emulated by ISA caps on an AVX-512 CPU"


def test_decoding_refuses_bfloat16_under_the_avx2_caps():
    import decoding

    with pytest.raises(SystemExit, match=re.escape(decoding.NO_BFLOAT16_UNDER_CAPS)):
        decoding.main(["forced", "--isa", "avx2", "--runners", "python", "python_bfloat16"])
    parse = decoding.main.parser().parse_args
    assert "python_bfloat16" not in decoding.chosen_systems(parse(["verses", "--model-dir", "m", "--isa", "avx2"]))
    assert "python_bfloat16" in decoding.chosen_systems(parse(["forced"]))


def test_decode_workers_run_each_engine_on_the_threads_asked(monkeypatch):
    """--intra-threads and --inter-threads reach CTranslate2's `intra_threads` and `inter_threads`
    (0 and 1, its defaults, without them)."""
    import ctranslate2
    import decode_worker
    import decoding

    calls = []
    monkeypatch.setattr(ctranslate2, "Translator", lambda path, **kwargs: calls.append(kwargs))
    for argv, intra, inter in ([], 0, 1), (["--intra-threads", "1", "--inter-threads", "2"], 1, 2):
        args = decoding.main.parser().parse_args(["verses", "--model-dir", "m", *argv])
        job = {"system": "ctranslate2_int8", "ctranslate2_dir": "d", **vars(args)}
        decode_worker.ctranslate2_translator(job)
        assert decode_worker.threads(job) == {"intra_threads": intra, "inter_threads": inter}
    assert calls == [
        {"compute_type": "int8", "intra_threads": 0, "inter_threads": 1},
        {"compute_type": "int8", "intra_threads": 1, "inter_threads": 2},
    ]


@pytest.mark.slow
def test_decoding_forced_runs_every_runner_in_its_own_process(capsys):
    """Every runner's beam search on the fixed work, each in a worker, under the AVX2 caps (which
    every library must accept). One sentence: the batch and its first sentence are one input
    shape, so the XLA and keras-hub runners trace and compile once."""
    import decoding

    runners = [name for name in decoding.FORCED_TF if name != "tflite_int8" and "bfloat16" not in name]
    runners += ["ctranslate2", "ctranslate2_int8"]
    work = [*DECODE_WORK, "--sentences", "1"]  # the last --sentences counts
    argv = ["forced", *work, "--beam-size", "2", "--runners", *runners, "--rounds", "2", "--isa", "avx2"]
    line = run_main("decoding", [*argv, "--intra-threads", "1", "--inter-threads", "1"], capsys)
    assert set(line["systems"]) == set(runners) and line["reference"] == "ctranslate2"
    assert line["intra_threads"] == 1 and line["inter_threads"] == 1
    assert {(s["intra_threads"], s["inter_threads"]) for s in line["systems"].values()} == {(1, 1)}
    assert line["isa_caps"]["CT2_FORCE_CPU_ISA"] == "AVX2" and "avx2" in line["machine"]["cpu_flags"]
    assert line["tgt_tokens_per_s_over_reference"]["ctranslate2"] == 1.0
    for name, system in line["systems"].items():
        assert system["generated_tokens"] == 2 and len(system["batch_s_per_round"]) == 2
        assert system["tgt_tokens_per_s"] == pytest.approx(1 * 2 / system["batch_s_median"], rel=0.01)
        assert line["tgt_tokens_per_s_over_reference"][name] > 0
    assert line["systems"]["ctranslate2"]["package"].startswith("ctranslate2==")
    assert line["systems"]["keras_hub"]["alpha"] is None and line["systems"]["python"]["alpha"] == 0.6


@pytest.mark.slow
def test_decoding_forced_greedy(capsys, in_process_workers):
    argv = ["forced", *DECODE_WORK, "--search", "greedy", "--runners", "python", "ctranslate2", "--rounds", "1"]
    line = run_main("decoding", argv, capsys)
    for system in line["systems"].values():
        assert system["beam_size"] == 1 and system["alpha"] is None and system["generated_tokens"] == 2
    assert line["isa"] == "native" and line["isa_caps"] == {} and line["load_after"]


@pytest.mark.slow
def test_decoding_verses_with_bfloat16(capsys, trained, in_process_workers):
    """Every verses system, its workers in this process. Two verses: the workers' warm-up
    translates two, so the timed round traces and compiles nothing new."""
    import decoding

    systems = [name for name in decoding.VERSES_TF if "shortlist" not in name] + ["ctranslate2", "ctranslate2_int8"]
    argv = ["verses", "--model-dir", trained.model_dir, "--limit", "2", "--beam-size", "2", "--rounds", "1"]
    line = run_main("decoding", argv + ["--systems", *systems], capsys)
    assert set(line["systems"]) == set(systems) and line["sentences"] == 2 and line["isa"] == "native"
    for system in line["systems"].values():
        assert system["target_tokens"] > 0 and system["tgt_tokens_per_s"] > 0 and 0 <= system["bleu"] <= 100
    assert line["tgt_tokens_per_s_over_reference"]["ctranslate2"] == 1.0
    ours = line["systems"]["python"]
    for same in ("xla", "savedmodel", "savedmodel_xla"):  # the same search, another execution path
        assert line["systems"][same]["target_tokens"] == ours["target_tokens"]
        assert line["systems"][same]["bleu"] == ours["bleu"]


@pytest.mark.slow
def test_decoding_int8_compares_int8_weights_per_sentence(capsys, trained, in_process_workers):
    """`int8`: Translator and the SavedModel in float32 and with int8 weights, and CTranslate2 fp32
    and int8, one verse per batch on one thread each (by default; in-process workers cannot set
    TensorFlow's threads: engines' defaults here); the int8 SavedModel runs the int8 Translator's search."""
    import decoding

    defaults = decoding.main.parser().parse_args(["int8", "--model-dir", "m"])
    assert (defaults.batch_size, defaults.intra_threads, defaults.inter_threads) == (1, 1, 1)
    argv = ["int8", "--model-dir", trained.model_dir, "--limit", "2", "--beam-size", "2", "--rounds", "1"]
    line = run_main("decoding", [*argv, "--intra-threads", "0", "--inter-threads", "0"], capsys)
    assert list(line["systems"]) == decoding.INT8_SYSTEMS and line["mode"] == "int8" and line["batch_size"] == 1
    assert line["tgt_tokens_per_s_over_reference"]["ctranslate2"] == 1.0
    int8, served = line["systems"]["python_int8"], line["systems"]["savedmodel_int8"]
    assert int8["target_tokens"] == served["target_tokens"] > 0 and int8["bleu"] == served["bleu"]


@pytest.mark.slow
def test_decoding_frontier_puts_each_models_systems_on_one_plot(capsys, trained, in_process_workers, tmp_path):
    """`frontier`: per model dir, ours with and without the shortlist and int8 weights, and
    CTranslate2 fp32, int8 and int8 over the vocabulary map of the same shortlist: a point each, and the PNG."""
    import shutil

    import decoding

    from keras_transformer.cli.main import main as cli

    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    assert cli(["shortlist", "--model-dir", model_dir, "--per-source", "8", "--frequent", "20"]) == 0
    capsys.readouterr()  # the command's own output
    plot = str(tmp_path / "frontier.png")
    argv = ["frontier", "--model-dirs", model_dir, "--labels", "tiny", "--limit", "2", "--beam-size", "2"]
    line = run_main(
        "decoding", [*argv, "--rounds", "1", "--intra-threads", "0", "--inter-threads", "0", "--plot", plot], capsys
    )
    assert [(p["model"], p["system"]) for p in line["points"]] == [("tiny", s) for s in decoding.FRONTIER_SYSTEMS]
    for point in line["points"]:
        assert point["tgt_tokens_per_s"] > 0 and 0 <= point["bleu"] <= 100 and point["over_ctranslate2"] > 0
    assert pathlib.Path(plot).stat().st_size > 1000


@pytest.mark.slow
def test_search_steps_counts_the_work_of_each_stopping_rule(capsys, trained):
    argv = ["search-steps", "--model-dir", trained.model_dir, "--limit", "3", "--beam-size", "2"]
    line = run_main("decoding", argv, capsys)
    for counts in line["rules"].values():  # 3 sentences x 2 hypotheses at most, per step
        assert 0 < counts["decoder_steps"] * 2 <= counts["hypothesis_steps"] <= counts["decoder_steps"] * 2 * 3
    exact, patience = line["rules"]["exact"], line["rules"]["patience_1"]
    ratio = exact["hypothesis_steps"] / patience["hypothesis_steps"]
    assert line["exact_over_patience_1"]["hypothesis_steps"] == round(ratio, 3)


@pytest.mark.slow
def test_compare(capsys):
    line = run_main(
        "training",
        ["compare", "--workload", "tiny", "--rounds", "1", "--steps", "1", "--warmup", "1", "--ceiling-size", "256"],
        capsys,
    )
    assert set(line["systems"]) == {"ours", "keras_hub"} and line["speedup_ours_over_keras_hub"] > 0


class ScriptedBackend:
    """`training.BackendWorker` without its process: the step times of `STEP_S`, every request logged."""

    STEP_S = {"tensorflow": {"ours": 0.2, "keras_hub": 0.4}, "jax": {"ours": 0.1, "keras_hub": 0.25}}
    asked: list = []

    def __init__(self, job: dict, folder: str, env: dict[str, str]):
        self.name = job["system"]
        self.asked.append((self.name, "started"))

    def read(self) -> dict:
        self.asked.append((self.name, "ready"))
        ready = {"jit_compile": {"ours": True, "keras_hub": True}, "params": {"ours": 1, "keras_hub": 2}}
        ready |= {"warmup_s": {"ours": 0.0, "keras_hub": 0.0}, "max_rss_gib": 1.5}
        return {"ready": True, "backend_version": "0", **ready}

    def ask(self, command: str) -> dict:
        self.asked.append((self.name, command))
        return {"finished": True} if command == "finish" else {"step_s": self.STEP_S[self.name][command]}

    def close(self) -> None:
        pass


def test_backends_alternates_backends_and_models_and_divides_medians(capsys, monkeypatch):
    import training

    monkeypatch.setattr(training, "BackendWorker", ScriptedBackend)
    monkeypatch.setattr(ScriptedBackend, "asked", [])
    argv = ["backends", "--workload", "tiny", "--backends", "tensorflow", "jax", "--rounds", "2", "--steps", "1"]
    line = run_main("training", argv, capsys)
    one_round = [("tensorflow", "ours"), ("jax", "ours"), ("tensorflow", "keras_hub"), ("jax", "keras_hub")]
    warm_ups = [("tensorflow", "started"), ("tensorflow", "ready"), ("jax", "started"), ("jax", "ready")]  # in turn
    assert ScriptedBackend.asked == warm_ups + one_round * 2 + [("tensorflow", "finish"), ("jax", "finish")]
    tokens = 8 * 12  # the tiny workload's batch x target length
    assert line["backends"]["jax"]["ours"]["tgt_tokens_per_s"] == pytest.approx(tokens / 0.1)
    assert line["backends"]["tensorflow"]["keras_hub"]["step_s_per_round"] == [0.4, 0.4]
    assert line["tgt_tokens_per_s_over_reference"] == {
        "ours": {"tensorflow": 1.0, "jax": 2.0},
        "keras_hub": {"tensorflow": 1.0, "jax": 1.6},
    }
    assert line["speedup_ours_over_keras_hub"] == {"tensorflow": 2.0, "jax": 2.5}
    assert line["max_rss_gib_after_warmup"] == {"tensorflow": 1.5, "jax": 1.5}
    assert (
        line["reference_backend"] == "tensorflow" and "cpu_flags" in line["machine"] and len(line["load_before"]) == 3
    )


@pytest.mark.slow
def test_backends_trains_on_every_backend_in_its_own_process(capsys):
    argv = ["backends", "--workload", "tiny", "--rounds", "1", "--steps", "1", "--warmup", "1"]
    line = run_main("training", argv, capsys)
    assert set(line["backends"]) == {"tensorflow", "jax", "torch"}
    assert set(line["versions_of_backends"]) == {"tensorflow", "jax", "torch"}
    for systems in line["backends"].values():
        assert set(systems) == {"ours", "keras_hub"}
        assert all(system["tgt_tokens_per_s"] > 0 and system["params"] > 0 for system in systems.values())
    assert line["backends"]["jax"]["ours"]["jit_compile"] and not line["backends"]["torch"]["ours"]["jit_compile"]
    assert line["backends"]["tensorflow"]["ours"]["params"] == line["backends"]["jax"]["ours"]["params"]


@pytest.mark.slow
def test_seed_parallelism(capsys, tmp_path):
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
    line = run_main("training", ["seed-parallelism", *argv, "--plot", str(png)], capsys)
    assert [row["length"] for row in line["rows"]] == [4] and png.stat().st_size > 0


@pytest.mark.slow
def test_input_pipeline(capsys):
    from conftest import FIXTURE

    argv = ["--data", str(FIXTURE), "--batches", "2", "--warmup", "1", "--tokenizer-sample", "400"]
    line = run_main("training", ["input-pipeline", *argv], capsys)
    assert line["tgt_tokens_per_s"] > 0 and line["cores_for_1m_tgt_tokens_per_s"] > 0 and line["max_length"] == 256


@pytest.mark.slow
def test_data_memory(capsys, tmp_path):
    import data
    from conftest import FIXTURE

    data.main(["make-tsv", str(tmp_path / "big.tsv"), "--lines", "3"])
    assert (tmp_path / "big.tsv").read_text(encoding="utf-8").splitlines()[2].endswith(" #2")
    line = run_main("data", ["memory", "--data", str(FIXTURE), "--steps", "1"], capsys)
    run = line["runs"][str(FIXTURE)]
    assert run["peak_rss_mb"] > 100 and 0 < run["first_step_s"] < run["total_s"]


@pytest.mark.slow
def test_int8_matmul_times_each_precision_on_the_same_weights(capsys):
    argv = ["int8-matmul", "--models", "tiny", "--rows", "2", "--repeats", "1"]
    line = run_main("profiles", argv, capsys)
    row = line["models"]["tiny"]["2"]
    assert set(row["matrices"]) == {"attention", "ffn_in", "ffn_out", "output"}
    output = row["matrices"]["output"]
    assert output["shape"] == [2, 64, 500] and output["copies"] == 2  # once a step; at least 2
    assert row["matrices"]["attention"]["copies"] == 12  # 6 per decoder layer, 2 layers
    for matrix in row["matrices"].values():
        assert matrix["over_float32"]["float32"] == 1.0 and min(matrix["us"].values()) > 0
        # int8 weights (and Keras' int8 activations) of the float32 layer's weights: close, not equal
        assert 0 < matrix["max_relative_error"]["int8_weights"] < 0.03
        assert 0 < matrix["max_relative_error"]["keras_int8"] < 0.06
    assert row["step_over_float32"]["float32"] == 1.0 and row["step_us"]["keras_int8"] > 0


@pytest.mark.slow
def test_profile_decode_splits_a_step(capsys, tmp_path, monkeypatch):
    argv = ["decode", "--models", "tiny", "--batches", "1", "2", "--source-length", "5", "--generate", "3"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # recorded (oneDNN read it when this process started)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    line = run_main("profiles", argv + ["--logdir", str(tmp_path), "--ceiling-size", "256"], capsys)
    assert line["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert [(row["model"], row["batch"]) for row in line["steps"]] == [("tiny", 1), ("tiny", 2)]
    assert line["per_op_cost_us"] > 0 and line["matmul_rate_gflops"] > 0
    from flops import decode_step_flops

    from keras_transformer import TransformerConfig

    for row in line["steps"]:
        assert set(row["parts_ms_per_step"]) == {"matmul", "attention", "search", "other_model"}
        assert row["parts_ms_per_step"]["matmul"] > 0 and row["parts_ms_per_step"]["search"] > 0
        assert row["ops_per_step"] > 50 and row["per_op_overhead_ms_per_step"] > 0
        config = TransformerConfig.tiny(vocab_size=500)
        assert row["flops_per_step"] == decode_step_flops(config, row["batch"] * 4, 5, 2.0)


def test_token_selection_times_both_ways_on_the_same_logits(capsys):
    argv = ["--rows", "4", "--vocab", "300", "--blocks", "16", "--iterations", "3", "--repeats", "1"]  # default threads
    line = run_main("decoding", ["token-selection", *argv], capsys)
    (row,) = line["costs"]
    assert (row["rows"], row["vocab_size"], row["tokens_per_row"], row["default_block"]) == (4, 300, 10, 10)
    assert set(row["blocked_top_k_us"]) == {"10", "16"} and line["threads"] == "default"
    assert row["plain_over_search"] == round(row["plain_us"] / row["search_us"], 2)


def test_decode_step_flops_by_hand():
    from flops import decode_step_flops

    from keras_transformer import TransformerConfig

    config = TransformerConfig(vocab_size=100, num_layers=1, d_model=8, d_ff=16, num_heads=2)
    # one layer: 6 d^2 + 2 d d_ff = 384 + 256 weights; output 100 x 8; attention 2 x 8 x (3 + 5)
    assert decode_step_flops(config, 2, 5, 3) == 2 * 2 * (384 + 256 + 800 + 128)


@pytest.mark.slow
def test_alignment_names_counts_the_names_of_source_and_output(capsys, trained):
    import quality as alignment_names

    pairs = [(0, 0), (1, 1), (2, 2), (3, 3), (2, 4)]  # "Ruth" to "said"
    assert alignment_names.name_cases("And Naomi said to Ruth,", "Und Naomi sprach zu Ruth:", pairs) == [True, False]
    assert alignment_names.name_cases("Naomi's sons", "Naomis Söhne", [(0, 0), (1, 1)]) == []  # not the same string
    argv = ["alignment-names", "--model-dir", trained.model_dir, "--alignment-layer", "-2", "-1"]
    line = run_main("quality", argv, capsys)
    assert line["verses"] == 8 and 0 <= line["verses_with_names"] <= 8 and set(line["layers"]) == {"-2", "-1"}
    for layer in line["layers"].values():
        assert 0 <= layer["aligned"] <= layer["names_in_source_and_output"]


@pytest.mark.slow
def test_score_compare(capsys, trained):
    argv = ["score-compare", "--model-dir", trained.model_dir, "--limit", "3", "--rounds", "1"]
    line = run_main("quality", argv, capsys)
    assert line["pairs"] == 3 and set(line["systems"]) == {"ours", "ctranslate2"}
    assert all(system["pairs_per_s"] > 0 for system in line["systems"].values())
    assert 0 <= line["max_abs_log_prob_difference"] < 1.0


@pytest.mark.slow
def test_search_grid_scores_each_setting_on_the_validation_split(capsys, trained):
    argv = [
        "search-grid",
        "--model-dir",
        trained.model_dir,
        "--limit",
        "3",
        "--beam-sizes",
        "1",
        "2",
        "--alphas",
        "0",
        "1",
    ]
    line = run_main("quality", argv, capsys)
    assert line["split"] == "validation" and line["pairs"] == 3
    assert [(point["beam_size"], point["alpha"]) for point in line["grid"]] == [(1, 0.0), (2, 0.0), (2, 1.0)]
    best = max((point["bleu"], point["chrf"]) for point in line["grid"])  # BLEU, then chrF on a tie
    assert (line["best"]["bleu"], line["best"]["chrf"]) == best


@pytest.mark.slow
def test_constraints_puts_every_phrase_in_the_outputs(capsys, trained):
    line = run_main("quality", ["constraints", "--model-dir", trained.model_dir, "--limit", "4"], capsys)
    assert line["verses"] == 4 and line["phrases"] >= 4 and line["inclusion_share"] == 1.0
    assert set(line["seconds_per_verse_by_phrases"]) == {"0", "1", "2", "3"}
    assert line["unconstrained"]["sentences"] == line["constrained"]["sentences"] == 4


@pytest.mark.slow
def test_paragraphs_drops_no_verse(capsys, trained):
    argv = ["paragraphs", "--model-dir", trained.model_dir, "--limit", "8", "--rounds", "2"]
    line = run_main("quality", argv, capsys)
    assert line["verses"] == 8 and line["lines"] == 2 and line["sentences"] >= 2 and line["rounds"] == 2
    assert line["verses_dropped"]["paragraphs"] == 0 and line["tokens_past_max_length"]["paragraphs"] == 0
    ways = ("per_verse", "sentences_apart", "paragraphs", "unsplit")
    assert [line[name]["sentences"] for name in ways] == [2] * 4  # each way scored on the 2 lines
    assert all(line[name]["seconds"] > 0 for name in ways)
    ratio = line["paragraphs"]["seconds"] / line["sentences_apart"]["seconds"]
    assert line["paragraphs_over_sentences_apart"] == pytest.approx(ratio, rel=0.02)  # of the rounded seconds
    # the paragraphs' translations are their sentences' translated apart, joined
    assert line["same_as_apart_share"] == 1.0 and line["paragraphs"]["bleu"] == line["sentences_apart"]["bleu"]


@pytest.mark.slow
def test_markup_keeps_the_spans_of_software_strings_and_tagged_verses(capsys, trained):
    line = run_main("quality", ["markup", "--model-dir", trained.model_dir, "--limit", "4"], capsys)
    assert line["software"]["pairs_with_spans"] == 4 and line["software"]["exact_share"]["protected"] == 1.0
    assert line["verses"]["verses"] == 4 and line["verses"]["tags_exact_share"] == 1.0
    assert line["verses"]["tagged_stripped"]["sentences"] == line["verses"]["untagged"]["sentences"] == 4


def test_glossary_terms_pair_frequent_held_out_words_with_their_most_associated_training_word():
    """The rule by hand: "the" is a stopword, "queen" in one training source only; Dice("king",
    "könig") = 2 x 2 / (3 + 2) beats "der"'s 2 x 2 / (3 + 3), and "könig" is in 2 of the 3
    targets of "king"; "ate" and "spoke" always give "aß" and "sprach"."""
    from quality import glossary_terms

    train = (
        ["the king spoke", "the king slept", "the king ate", "the queen spoke", "the dog ate"],
        ["der König sprach", "der König schlief", "des Königs Brot aß", "die Königin sprach", "der Hund aß"],
    )
    held_out = ["The king spoke.", "The dog ate the king's bread.", "The king, the queen"]
    rule = dict(terms=2, stopwords=1, min_pairs=2)
    everything = lambda target: True  # noqa: E731
    assert glossary_terms(train, held_out, everything, min_share=0.6, **rule) == [("king", "König"), ("ate", "aß")]
    assert glossary_terms(train, held_out, everything, min_share=0.8, **rule) == [("ate", "aß"), ("spoke", "sprach")]
    no_eszett = lambda target: "ß" not in target  # noqa: E731
    assert glossary_terms(train, held_out, no_eszett, min_share=0.6, **rule) == [("king", "König"), ("spoke", "sprach")]
    # "didn't" is one word; its target "nicht" (Dice 2 / 6, first of a tie) is the word in most targets
    train = (
        ["he did not go", "she did not come", "he didn't stay", "they didn't go"],
        ["er ging nicht", "sie kam nicht", "er blieb nicht", "sie gingen nicht"],
    )
    rule = dict(terms=2, min_pairs=2, min_share=1.0)
    assert glossary_terms(train, ["He didn't know."], everything, stopwords=0, **rule) == [
        ("didn't", "nicht"),
        ("he", "er"),
    ]
    assert glossary_terms(train, ["He didn't know."], everything, stopwords=1, **rule) == [("he", "er")]


def test_unknown_puts_an_item_between_two_words_and_finds_its_byte_pieces():
    import random

    from quality import inserted, spelt

    assert {inserted("Jesus wept.", "👑", random.Random(seed)) for seed in range(20)} == {
        "👑 Jesus wept.", "Jesus 👑 wept.", "Jesus wept. 👑"
    }  # fmt: skip
    assert spelt([5, 1, 2, 3, 9], [1, 2, 3]) and not spelt([1, 2, 9, 3], [1, 2, 3]) and not spelt([1, 2], [])


@pytest.mark.slow
def test_glossary_puts_every_target_term_in_the_outputs(capsys, trained, tmp_path):
    from keras_transformer import Glossary

    terms = tmp_path / "terms.tsv"
    rule = ["--terms", "5", "--stopwords", "20", "--min-pairs", "2", "--min-share", "0.5"]
    argv = ["glossary", "--model-dir", trained.model_dir, *rule, "--write-glossary", str(terms)]
    line = run_main("quality", argv, capsys)
    assert 1 <= len(line["terms"]) <= 5
    assert [list(term) for term in Glossary.from_tsv(str(terms)).terms] == line["terms"]
    assert line["verses"] == 8 and 1 <= line["verses_with_terms"] <= 8
    assert line["with_glossary"]["target_share"] == 1.0 and 0 <= line["without_glossary"]["target_share"] <= 1
    assert line["with_glossary"]["sentences"] == line["without_glossary"]["sentences"] == 8
    assert line["with_glossary"]["seconds"] > 0 and line["without_glossary"]["seconds"] > 0


@pytest.mark.slow
def test_unknown_keeps_every_item_by_default_and_loses_it_unprotected(capsys, trained):
    """The fixture's tokenizer (300 pieces) has no byte fallback: without protection every item
    becomes <unk> and is lost; by the default path (markup on) each is taken out and put back once."""
    line = run_main("quality", ["unknown", "--model-dir", trained.model_dir, "--sentences", "6"], capsys)
    assert line["byte_fallback"] is False and line["sentences"] == 6
    assert line["by_kind"] == {"emoji": 2, "cjk": 2, "symbol": 2} and line["not_unseen"] == []
    assert line["unprotected_kept_share"] == line["bytes_in_source_share"] == line["bytes_in_search_share"] == 0.0
    assert line["unprotected_kept_share_by_kind"] == {"emoji": 0.0, "cjk": 0.0, "symbol": 0.0}
    assert line["kept_share"] == 1.0 and line["kept_share_by_kind"] == {"emoji": 1.0, "cjk": 1.0, "symbol": 1.0}
    assert line["scores"]["inserted"]["sentences"] == line["scores"]["unprotected"]["sentences"] == 6


@pytest.mark.slow
def test_shortlist_builds_it_and_compares_bleu_and_speed(capsys, trained, tmp_path):
    import shutil

    model_dir = str(tmp_path / "model")
    shutil.copytree(trained.model_dir, model_dir)
    argv = ["shortlist", "--model-dir", model_dir, "--limit", "4", "--rounds", "1", "--beam-size", "2"]
    line = run_main("quality", argv, capsys)
    assert line["verses"] == 4 and (tmp_path / "model" / "shortlist.npz").is_file()
    assert line["full"]["sentences"] == line["shortlist"]["sentences"] == 4
    assert line["speedup"] > 0 and 0 <= line["identical_share"] <= 1


@pytest.mark.slow
def test_casing_trains_without_and_with_it_and_scores_each_casing(capsys, tmp_path):
    """Tiny mode: two 2-step runs on the fixture, two held-out verses scored three ways each."""
    from conftest import FIXTURE, TINY_TRAINING

    argv = ["casing", "--data", str(FIXTURE), *TINY_TRAINING, "--max-steps", "2", "--steps-per-epoch", "2"]
    argv += ["--tokenizer-sample", "200", "--limit", "2", "--model-dir", str(tmp_path / "casing")]
    line = run_main("quality", argv, capsys)
    assert line["augmentation"] == {"uppercase_share": 0.05, "titlecase_share": 0.05, "source_noise": 0.0}
    assert set(line["bleu"]) == {"plain", "cased"} and all(
        set(bleu) == {"normal", "upper", "title"} for bleu in line["bleu"].values()
    )
    assert line["verses"] == 2 and [run["steps"] for run in line["runs"].values()] == [2, 2]
    stored = [
        json.loads((tmp_path / f"casing-{run}" / "config.json").read_text())["data_config"]
        for run in ("plain", "cased")
    ]
    assert [config["uppercase_share"] for config in stored] == [0.0, 0.05]


@pytest.mark.slow
def test_controls_cost_times_every_control(capsys, trained):
    argv = ["controls-cost", "--model-dir", trained.model_dir, "--limit", "3", "--rounds", "1"]
    line = run_main("decoding", argv, capsys)
    assert line["sentences"] == 3 and set(line["systems"]) >= {"none", "no_repeat_ngram_size", "all"}
    assert line["systems"]["none"]["time_over_none"] == 1.0
    assert all(system["tgt_tokens_per_s"] > 0 for system in line["systems"].values())


@pytest.mark.slow
def test_pretrained_imports_exports_and_times_every_engine_on_the_same_weights(capsys):
    """The tiny size (tests/marian_maker.py's): three worker processes, one TensorFlow import."""
    line = run_main("pretrained", ["--size", "tiny", "--rounds", "1", "--repeats", "1"], capsys)
    assert line["model"]["layers"] == 2 and line["model"]["parameters"] > 0 and line["import_s"] > 0
    assert line["saved_model_bytes"] > line["saved_model_ids_bytes"] > 0 and line["ctranslate2_bytes"] > 0
    assert set(line["systems"]) == {"savedmodel", "ctranslate2", "ctranslate2_int8"}
    assert all(system["batch1_latency_s"] > 0 for system in line["systems"].values())
    assert line["same_output"]["savedmodel"]  # the two engines compute the same model
    assert line["cpu_flags"] == line["machine"]["cpu_flags"] and len(line["load_before"]) == 3


@pytest.mark.slow
def test_threads_and_translator_time_translate_the_held_out_verses(capsys, trained):
    line = run_main(
        "decoding", ["threads", "--model-dir", trained.model_dir, "--requests", "3", "--threads", "2"], capsys
    )
    assert line["sentences"] == 1 + 2 + 3 and line["identical_outputs"] and line["sentences_per_s_1_thread"] > 0
    line = run_main("decoding", ["translator-time", trained.model_dir], capsys)
    assert len(line["seconds"]) == 3 and line["median"] == sorted(line["seconds"])[1] and 0 <= line["bleu"] <= 100


@pytest.mark.slow
def test_translate_memory_samples_a_translate_process(capsys, trained):
    line = run_main("data", ["translate-memory", "--model-dir", trained.model_dir, "--lines", "4"], capsys)
    assert line["exit_status"] == 0 and line["lines_in"] == line["lines_out"] == 4
    assert line["repeated_lines_translated_alike"] and line["rss_mb_peak"] > 100
