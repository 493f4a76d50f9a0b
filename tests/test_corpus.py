"""Corpus-scale work (keras_transformer/corpus/, issue 53): the cleaning filters drop exactly their
planted pairs (in `clean`, `train --clean` and the Beam stage), the back-translation noise is
seeded and local, a poisoned text costs its own line only; on Apache Beam's DirectRunner
(slow): translate-corpus equals `Translator` line by line, two language pairs side by side through
the keyed handler, dead letters with their reasons, back-translation reproducible and tagged."""

import glob

import pytest

from keras_transformer.cli.main import main
from keras_transformer.corpus.cleaning import FILTERS, CleaningConfig, clean_pairs, normalised, script
from keras_transformer.corpus.noise import FILLER, noised

CLEAN = [
    ("In the beginning God created the heaven and the earth.", "Am Anfang schuf Gott Himmel und Erde."),
    ("Jesus wept.", "Und Jesus gingen die Augen über."),
    ("And God said, Let there be light: and there was light.", "Und Gott sprach: Es werde Licht! Und es ward Licht."),
    ("Amen.", "Amen, so sei es."),  # a short pair: 5 vs 16 characters passes the smoothed ratio
    ("The grace of our Lord be with you.", "Die Gnade unsers Herrn sei mit euch."),
]
# Each planted fault, with the filter that must drop it (the first of FILTERS that fails it).
PLANTED = [
    (("   ", "Leer."), "empty"),
    (("Jesus wept.", "x" * 1001), "too_long"),
    (("Jesus wept.", "Und Jesus weinte lange, bis in die Nacht, und alle sahen es. " * 4), "length_ratio"),
    (("Jesus wept.", "jesus wept. "), "copy"),
    (("The grace of our Lord.", "Благодать Господа нашего."), "wrong_script"),
    (("Jesus wept.", "Und Jesus gingen die Augen über."), "duplicate"),
    (("JESUS WEPT 2", "Und Jesus gingen die Augen über!"), "near_duplicate"),
]


def planted_corpus():
    """The clean pairs with the planted ones among them: (pairs, expected kept)."""
    pairs = list(CLEAN)
    for i, (pair, _) in enumerate(PLANTED):
        pairs.insert(2 + i, pair)  # after the pairs the duplicates copy
    return pairs, CLEAN


def test_each_filter_drops_its_planted_pairs_and_keeps_the_clean_ones():
    pairs, expected = planted_corpus()
    judges = []
    assert list(clean_pairs(pairs, CleaningConfig(), judges)) == expected
    (judge,) = judges
    assert judge.scripts == ("LATIN", "LATIN")
    assert dict(judge.counts) == {name: 1 for name in FILTERS}
    assert judge.report().startswith(f"kept {len(CLEAN)} of {len(pairs)} pairs; dropped: empty 1, too_long 1")
    # given scripts: a Cyrillic target side is the right one, and the Latin targets are the wrong ones
    russian = list(clean_pairs(pairs, CleaningConfig(scripts=("LATIN", "CYRILLIC"))))
    assert russian == [("The grace of our Lord.", "Благодать Господа нашего.")]


def test_scripts_and_the_near_duplicate_key():
    assert [script(c) for c in "aЖ中ع1 "] == ["LATIN", "CYRILLIC", "CJK", "ARABIC", None, None]
    assert normalised("Jesus wept, 2 times!") == normalised("JESUS  WEPT times") == "jesuswepttimes"


def test_the_clean_command_writes_the_kept_pairs_and_reports_each_filter(tmp_path, capsys):
    pairs, expected = planted_corpus()
    source = tmp_path / "pairs.tsv"
    source.write_bytes(b"".join(f"{s}\t{t}\n".encode() for s, t in pairs) + b"no tab here\n\xff\tbroken\n")
    assert main(["clean", "--input", str(source), "--output", str(tmp_path / "clean.tsv")]) == 0
    assert (tmp_path / "clean.tsv").read_text(encoding="utf-8") == "".join(f"{s}\t{t}\n" for s, t in expected)
    report = capsys.readouterr().err
    dropped = ", ".join(f"{name} 1" for name in FILTERS)
    assert f"kept 5 of 12 pairs; dropped: {dropped}; scripts LATIN,LATIN" in report
    assert f"skipped 2 malformed lines (not UTF-8 or not one tab), the first {source}:13" in report


def test_train_clean_drops_the_planted_pairs_on_every_pass(tmp_path):
    import tensorflow as tf

    from keras_transformer.config import DataConfig
    from keras_transformer.data.mixing import cleaned

    pairs, expected = planted_corpus()
    dataset = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    assert cleaned(dataset, DataConfig()) is dataset
    passes = cleaned(dataset, DataConfig(clean=True)).repeat(2)
    got = [(s.decode(), t.decode()) for s, t in passes.as_numpy_iterator()]
    assert got == expected * 2  # the second pass is judged afresh: its pairs are no duplicates of the first's


def test_user_symbols_are_one_piece_of_a_learned_vocabulary(fixture_pairs):
    from keras_transformer.config import DataConfig
    from keras_transformer.data.tokenizer import SubwordTokenizer

    texts = [text for pair in fixture_pairs for text in pair][:400]
    assert DataConfig(user_symbols="<BT>, <blank>").symbols() == ("<BT>", "<blank>")
    with pytest.raises(ValueError, match="user_symbols must be pieces without spaces"):
        DataConfig(user_symbols="<BT>,,x")
    tokenizer = SubwordTokenizer.train(texts, 300, user_symbols=["<BT>"])
    pieces = [tokenizer.piece(i) for i in tokenizer.tokenize(["<BT> Jesus wept."]).to_list()[0]]
    assert "<BT>" in pieces and "<" not in "".join(p for p in pieces if p != "<BT>")
    plain = SubwordTokenizer.train(texts, 300)
    assert "<BT>" not in [plain.piece(i) for i in plain.tokenize(["<BT> Jesus wept."]).to_list()[0]]


def test_the_noise_is_seeded_by_run_and_line_and_moves_no_word_further_than_three(monkeypatch):
    from keras_transformer.corpus import noise

    words = [f"w{i}" for i in range(2000)]
    text = " ".join(words)
    once = noised(text, 7, "mono.txt:1")
    assert once == noised(text, 7, "mono.txt:1")
    assert once != noised(text, 8, "mono.txt:1") and once != noised(text, 7, "mono.txt:2")
    out = once.split()
    assert 0.07 < out.count(FILLER) / len(words) < 0.13 and 0.07 < 1 - len(out) / len(words) < 0.13  # 0.1 each
    monkeypatch.setattr(noise, "DROP", 0.0)
    monkeypatch.setattr(noise, "BLANK", 0.0)
    shuffled = noised(text, 7, "mono.txt:1").split()  # the local shuffle alone
    moves = [abs(i - int(word[1:])) for i, word in enumerate(shuffled)]
    assert sorted(shuffled) == sorted(words) and max(moves) == 3 and sum(map(bool, moves)) > len(words) / 2


def test_a_text_the_model_fails_on_costs_its_own_line_only():
    from keras_transformer.corpus.handlers import ExportHandler

    class Poisoned:  # a SavedModelTranslator that fails on "poison" and says which signature ran
        def translate(self, texts, markup=False, split=False):
            if "poison" in texts:
                raise ValueError("cannot translate\nsecond line")
            mode = "markup" if markup else "documents" if split else "sentences"
            return [f"{text.upper()} ({mode})" for text in texts]

    batch = [("a.txt:1", "jesus wept"), ("a.txt:2", "poison"), ("a.txt:3", "amen")]
    results = ExportHandler("unused").run_inference(batch, Poisoned())
    assert [result.example for result in results] == batch
    assert [result.inference for result in results] == [
        ("JESUS WEPT (sentences)", None),
        (None, "model error: ValueError: cannot translate"),
        ("AMEN (sentences)", None),
    ]
    for mode in ("documents", "markup"):
        results = ExportHandler("unused", mode=mode).run_inference(batch[:1], Poisoned())
        assert results[0].inference == (f"JESUS WEPT ({mode})", None)
    with pytest.raises(ValueError, match="unknown mode 'html'; choose one of sentences, documents, markup"):
        ExportHandler("unused", mode="html")


def test_a_translation_with_a_line_break_is_a_dead_letter_not_two_lines():
    """A sampled byte piece can write a newline (seen: 2 of 15,010 back-translated verses broke the
    TSV, and `train` refused it): such a translation goes to the dead letters with its reason in both
    pipelines, and the lines around it are written."""
    from apache_beam import pvalue
    from apache_beam.ml.inference.base import PredictionResult

    from keras_transformer.corpus.backtranslate import SyntheticPairs
    from keras_transformer.corpus.translate import SplitResults

    translations = ["Und es ward Licht.", "Und es\nward", "a\rb", "a\u2028b", "a\x85b", "Amen."]
    ids = [f"m.txt:{n}" for n in range(1, len(translations) + 1)]
    lines = [f"line {n}" for n in range(1, len(translations) + 1)]
    chunk = PredictionResult(("m.txt:0", list(zip(ids, lines))), [(t, None) for t in translations])
    pairs = list(SyntheticPairs(tag="<BT>", noise=False, seed=0).process(chunk))
    split = [
        out
        for line_id, text, translation in zip(ids, lines, translations)
        for out in SplitResults().process(PredictionResult((line_id, text), (translation, None)))
    ]
    reasons = {
        "m.txt:2": "a line break (U+000A) in the translation",
        "m.txt:3": "a line break (U+000D) in the translation",
        "m.txt:4": "a line break (U+2028) in the translation",
        "m.txt:5": "a line break (U+0085) in the translation",
    }
    expected = {
        "backtranslate": (pairs, ["<BT> Und es ward Licht.\tline 1", "<BT> Amen.\tline 6"]),
        "translate-corpus": (split, ["m.txt:1\tUnd es ward Licht.", "m.txt:6\tAmen."]),
    }
    for name, (outputs, written) in expected.items():
        letters = {o.value[0]: o.value[1] for o in outputs if isinstance(o, pvalue.TaggedOutput)}
        assert letters == reasons, name
        assert [o for o in outputs if not isinstance(o, pvalue.TaggedOutput)] == written, name


def test_directrunner_gets_two_worker_processes_unless_told_otherwise():
    from keras_transformer.corpus.beam_io import pipeline_options

    def chosen(args):
        options = pipeline_options(args).get_all_options()
        return options["runner"], options["direct_num_workers"], options["direct_running_mode"]

    assert chosen([]) == ("DirectRunner", 2, "multi_processing")
    assert chosen(["--direct_num_workers=1", "--direct_running_mode", "in_memory"]) == ("DirectRunner", 1, "in_memory")
    assert chosen(["--runner", "FlinkRunner"]) == ("FlinkRunner", 1, "in_memory")  # Beam's defaults, untouched
    assert pipeline_options([]).get_all_options()["default_sdk_harness_log_level"] == "WARNING"


def test_a_glob_matching_nothing_or_a_missing_dir_is_one_line_before_any_pipeline(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Jesus wept.\n", encoding="utf-8")
    out = ["--output", str(tmp_path / "out")]
    assert main(["translate-corpus", "--input", str(tmp_path / "*.tsv"), *out, "--export", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: --input {tmp_path / '*.tsv'}: no file matches")
    assert main(["backtranslate", "--input", str(tmp_path / "in.txt"), *out, "--model-dir", str(tmp_path / "no")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {tmp_path / 'no'}: no such directory")
    assert not list(tmp_path.glob("out*"))


def test_the_corpus_commands_answer_help_without_beam(capsys):
    for command in ("translate-corpus", "backtranslate", "clean"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--input" in capsys.readouterr().out


# ---- on Apache Beam's DirectRunner (slow: worker processes and exports) ----


def read_shards(pattern: str) -> dict[str, str]:
    """{id: value} of the ID<TAB>value lines of the files `pattern` matches."""
    rows = {}
    for path in glob.glob(pattern):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line_id, value = line.rstrip("\n").split("\t", 1)
                assert line_id not in rows, line_id
                rows[line_id] = value
    return rows


LINES = [
    "In the beginning God created the heaven and the earth.",
    "Jesus wept.",
    "",
    "And God said, Let there be light: and there was light.",
    "Amen. Jesus wept.",
    "The grace of our Lord Jesus Christ be with you all.",
]


@pytest.fixture(scope="module")
def exports(trained, translating, tmp_path_factory):
    """{name: (export dir, Translator)} of two models: en-de `translating` (it translates), en-xx `trained`
    (30 steps: it gives other outputs)."""
    from keras_transformer.exporters.tensorflow import export_tensorflow
    from keras_transformer.model_dir import load_model
    from keras_transformer.translation.translator import Translator

    made = {}
    for name, model_dir in (("en-de", translating.model_dir), ("en-xx", trained.model_dir)):
        model, tokenizer, _ = load_model(model_dir)
        out = str(tmp_path_factory.mktemp("corpus") / name)
        export_tensorflow(model, tokenizer, out, log=lambda message: None, tflite=False)
        made[name] = out, Translator(model, tokenizer)
    return made


@pytest.mark.slow
def test_translate_corpus_equals_the_translator_and_sends_poisoned_lines_to_the_dead_letters(
    exports, translating, tmp_path
):
    export, translator = exports["en-de"]
    lines = [*translating.sources[:3], "", *translating.sources[3:5]]  # sources it translates, and an empty line
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    poisoned = b"Jesus \xff wept.\n" + b"x" * 300 + b"\n"
    (tmp_path / "in" / "b.txt").write_bytes("\n".join(lines[4:]).encode() + b"\n" + poisoned)
    output = str(tmp_path / "out" / "part")
    status = main(
        ["translate-corpus", "--input", str(tmp_path / "in" / "*.txt"), "--output", output, "--export", export]
        + ["--max-line-bytes", "200"]
    )
    assert status == 0
    got = read_shards(output + "-*-of-*")
    ids = [f"a.txt:{n}" for n in range(1, 5)] + ["b.txt:1", "b.txt:2"]
    assert sorted(got) == sorted(ids)
    want = translator.translate(lines)
    assert [got[line_id] for line_id in ids] == want and sum(map(bool, want)) == 5  # order restored by id
    assert read_shards(output + ".failed-*-of-*") == {
        "b.txt:3": "invalid UTF-8 at byte 6",
        "b.txt:4": "line of 300 bytes, over the limit of 200",
    }


@pytest.mark.slow
def test_two_language_pairs_side_by_side_through_the_keyed_handler(exports, tmp_path):
    from keras_transformer.corpus.translate import translate_corpus

    keyed = [("en-de" if i % 2 else "en-xx", text) for i, text in enumerate(LINES)] + [("en-fr", "Jesus wept.")]
    (tmp_path / "keyed.tsv").write_text("".join(f"{key}\t{text}\n" for key, text in keyed), encoding="utf-8")
    output = str(tmp_path / "out" / "part")
    counts = translate_corpus(
        str(tmp_path / "keyed.tsv"), output, {name: path for name, (path, _) in exports.items()}, fmt="keyed"
    )
    assert counts == {"translated": len(LINES), "failed": 1}
    got = read_shards(output + "-*-of-*")
    for key in ("en-de", "en-xx"):
        numbers = [n for n, (k, _) in enumerate(keyed, 1) if k == key]
        want = exports[key][1].translate([keyed[n - 1][1] for n in numbers])
        assert [got[f"keyed.tsv:{n}"] for n in numbers] == want
    other = exports["en-xx"][1].translate([text for key, text in keyed if key == "en-de"])
    assert other != [got[f"keyed.tsv:{n}"] for n, (k, _) in enumerate(keyed, 1) if k == "en-de"]  # the routing shows
    failed = read_shards(output + ".failed-*-of-*")
    assert failed == {"keyed.tsv:7": "no export for key 'en-fr' (exports: en-de, en-xx)"}


@pytest.mark.slow
def test_back_translation_is_reproducible_with_a_seed_and_tagged(translating, tmp_path):
    from keras_transformer.corpus.backtranslate import backtranslate

    mono = tmp_path / "mono.de.txt"
    mono.write_text("\n".join(translating.targets[:12]) + "\n\n", encoding="utf-8")
    options = dict(sampling_topk=0, tag="<BT>", noise=True)
    single = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
    runs = {}
    for name, seed, beam_args in (("two", 3, []), ("one", 3, single), ("other", 4, single)):
        output = str(tmp_path / f"{name}.tsv")
        counts = backtranslate(str(mono), output, translating.model_dir, beam_args, seed=seed, **options)
        assert counts == {"pairs": 12, "failed": 1}
        runs[name] = sorted((tmp_path / f"{name}.tsv").read_text(encoding="utf-8").splitlines())
    assert runs["two"] == runs["one"] != runs["other"]  # two workers or one: the same pairs
    assert sorted(line.split("\t")[1] for line in runs["one"]) == sorted(translating.targets[:12])
    assert all(line.startswith("<BT> ") for line in runs["one"])
    assert read_shards(str(tmp_path / "one.tsv.failed-*")) == {"mono.de.txt:13": "empty line"}


@pytest.mark.slow
def test_the_cleaning_stage_on_beam_drops_what_clean_drops():
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from keras_transformer.corpus.stages import DROPPED, CleanPairs

    pairs, expected = planted_corpus()
    elements = [(f"p.tsv:{n}", pair) for n, pair in enumerate(pairs, 1)]
    kept_ids = [line_id for n, (line_id, pair) in enumerate(elements) if pair in expected and pair not in pairs[:n]]
    options = beam.options.pipeline_options.PipelineOptions(["--direct_num_workers=1"])
    with beam.Pipeline(options=options) as pipeline:
        out = pipeline | beam.Create(elements) | CleanPairs()
        assert_that(out["kept"] | "ids" >> beam.Keys(), equal_to(kept_ids), label="kept")
        reasons = out[DROPPED] | beam.Values()
        assert_that(reasons, equal_to(list(FILTERS)), label="dropped")


# ---- the benchmarks of bench/ on tiny inputs (their figures are the lead's, on a quiet machine) ----


def run_bench(module_name, argv, capsys):
    import json
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
    __import__(module_name).main(argv)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


@pytest.mark.slow
def test_bench_corpus_puts_the_pipeline_beside_one_process_on_the_same_export(exports, tmp_path, capsys):
    argv = ["corpus", "--export", exports["en-de"][0], "--lines", "4", "--workdir", str(tmp_path)]
    line = run_bench("data", argv, capsys)
    assert line["lines"] == line["lines_out"] == 4 and line["failed"] == 0 and line["outputs_identical"] is True
    assert line["throughput_ratio"] > 0 and set(line["seconds"]) == {"pipeline", "in_process"}


@pytest.mark.slow
def test_bench_backtranslation_trains_on_half_alone_and_with_the_other_half_back_translated(tmp_path, capsys):
    import json

    from conftest import TINY_TRAINING

    argv = ["backtranslation", *TINY_TRAINING, "--max-steps", "2", "--steps-per-epoch", "2", "--pairs", "40"]
    argv += ["--tokenizer-sample", "200", "--limit", "2", "--model-dir", str(tmp_path / "bt")]
    line = run_bench("quality", argv, capsys)
    assert line["parallel_pairs"] == line["monolingual_lines"] == line["synthetic_pairs"] == 20
    assert set(line["bleu"]) == {"real", "bt"} and [run["steps"] for run in line["runs"].values()] == [2, 2, 2]
    synthetic = (tmp_path / "bt-bt.tsv").read_text(encoding="utf-8").splitlines()
    assert len(synthetic) == 20 and all(pair.startswith("<BT> ") for pair in synthetic)
    data = json.loads((tmp_path / "bt-bt" / "config.json").read_text())["data_config"]
    assert data["data"] == f"{tmp_path / 'bt-a.tsv'}:0.5,{tmp_path / 'bt-bt.tsv'}:0.5"
    assert data["user_symbols"] == "<BT>"
