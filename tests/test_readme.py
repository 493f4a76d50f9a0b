"""README.md's examples run as written: every ```python block, and the ```sh commands that are
cheap and offline, in a temporary working directory.

Python blocks run in README order in one namespace (the Decoding block uses the training block's
`kt`, `model` and `source_ids`), statement by statement like notebook cells, so that the value of
each expression line is checked against what its comment promises. A new python block runs by
default; none is skipped today (SKIPPED_PYTHON). What the README leaves to the reader is provided:
  - "Translate from Python": `runs/demo` is a model dir with an untrained tiny model (5 checkpoints
    of its initial weights, its tokenizer learned on tests/data/fixture_bible.en-de.tsv);
  - "The Python API: training": `batches` (one batch of 2 sentences), `source_ids` and
    `target_in_ids` (4 tokens each, ids < 37000); the base model's 10 epochs on it take ~20 s,
    most of it the first step's tracing;
  - "Decoding": runs on the training block's base model and its 2 short sources (limit |source| + 50
    = 54 tokens, which random weights reach: a few seconds per search).

Shell commands run with bash, one after another in their block, in the same directory (`runs/small`
and `DIR` are copies of `runs/demo`), with the venv's `keras-transformer` on PATH and this checkout
on PYTHONPATH; each must exit 0, and SH_CHECKS check what their comments promise. Run: `--version;
train --help`; `translate` on runs/small (beam 4), on DIR greedy (`--beam-size 1 --alpha 0`) and
`--nbest 4`; `--glossary` (a glossary of one term: the line holds its target); `average --last 5`;
`evaluate --checkpoint averaged` (the fixture's last 2%: 8 pairs);
`export --format ctranslate2` (if ctranslate2 is installed); "Start from a pretrained model"'s
import of `opus-mt-en-de` (a tiny OPUS-MT directory made by tests/marian_maker.py), its translate,
its fine-tuning and export with TINY_SETTINGS appended (2 steps; SavedModels only, 4 pairs
checked). Skipped (SKIPPED_SH; each rule must match a README command, and a command no rule
matches runs):
  - `make demo`, `make test`: install into .venv, then train for 6 minutes or run the suite;
  - `pip install ...`: installs packages from the internet;
  - `keras-transformer train ...` (all but `train --help` and the fine-tuning of an import) and
    `python bench/quality.py table`: train for 30 minutes to 2 hours, or have `...` for their flags
    (tests/test_cli.py trains on the fixture);
  - `export --model-dir runs/small --out runs/export` and `export --check runs/export`: SavedModels
    and three TFLite conversions, ~20 s (tests/test_export.py runs the same command and check);
  - Decoding's `translate --model-dir DIR "Jesus wept."` and The command line's `evaluate
    --model-dir runs/small`: another block runs the same command on a copy of the model dir (the
    latter on its averaged checkpoint); ~6 s each, mostly TensorFlow's import.
The citations of bench/ (fast, nothing run): every `bench/RESULTS.md, "..."` in the READMEs, the
package, bench/ and the tests names one heading of bench/RESULTS.md (history: bench/JOURNAL.md), every
`python bench/SCRIPT SUBCOMMAND` named there exists, and every speed or quality figure of this README
sits beside its command and its RESULTS.md section.

On the 2-core development machine: ~65 s in all (python blocks ~38 s: training ~19 s, decoding
~16 s; sh commands ~27 s, ~5 s for each that imports TensorFlow), and "Start from a pretrained
model" ~105 s (import 7, translate 8, fine-tuning 14, export 19, export --check 57: three searches
traced, checkpoint and both SavedModels).
"""

import ast
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE
from marian_maker import fixture_spm, write_marian
from test_files import HTML, PO, SRT, XLIFF12

import keras_transformer as kt
from keras_transformer.model_dir import ModelDir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

# Python blocks not run, by heading: {heading: reason}. Empty: every python block runs.
SKIPPED_PYTHON: dict[str, str] = {}

# Shell commands not run: (regex on the command, reason). Everything else runs.
SKIPPED_SH = [
    (r"^make ", "installs into .venv, then trains for 6 minutes (demo) or runs the suite (test)"),
    (r"^pip install ", "installs packages from the internet"),
    (
        r"keras-transformer train (?!--help|--init-from runs/opus-mt-en-de )",
        "trains for 30 minutes to 2 hours, or has `...` for its flags",
    ),
    (r"^python bench/quality\.py ", "trains for 30 minutes"),
    # Two commands that another block runs on a copy of the same model dir (~6 s each):
    (r'^keras-transformer translate --model-dir DIR "Jesus wept\."$', "The command line's translate, on runs/small"),
    (r"^keras-transformer evaluate --model-dir runs/small$", "Decoding's evaluate, on DIR's averaged checkpoint"),
    (r"keras-transformer export --model-dir runs/small --out runs/export", "~20 s of exports; tests/test_export.py"),
    (r"keras-transformer export --check runs/export", "checks the export skipped above; tests/test_export.py"),
    (r"^keras-transformer (translate-corpus|backtranslate|clean) ", "Beam pipelines and files; tests/test_corpus.py"),
    (r"^keras-transformer translate-file .* --export ", "an export; tests/test_files.py translates a file with one"),
]


# Commands that run with tiny settings appended (later flags override the README's): (regex, flags).
TINY_SETTINGS = [
    (
        r"keras-transformer train --init-from runs/opus-mt-en-de ",
        "--max-steps 2 --steps-per-epoch 2 --batch-tokens 512 --bleu-every-epochs 0",
    ),
    # SavedModels only (~half the time; tests/test_export.py converts to TFLite), 4 pairs checked
    (r"keras-transformer export --model-dir runs/opus-software ", "--no-tflite"),
    (r"keras-transformer export --check runs/opus-export$", "--sample 4"),
]


def with_tiny_settings(command: str) -> str:
    """`command` as run: as written, or on one line without its comment, TINY_SETTINGS' flags appended."""
    flags = [flags for pattern, flags in TINY_SETTINGS if re.search(pattern, bare(command))]
    return " ".join([bare(command), *flags]) if flags else command


def readme_blocks() -> list[tuple[str, str, int, str]]:
    """Every fenced code block of README.md: (language, heading, first line number, code)."""
    blocks, heading, language, start, code = [], "", None, 0, []
    with open(README, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if language is None and line.startswith("## "):
                heading = line[3:].strip()
            elif language is None and line.startswith("```"):
                language, start, code = line[3:].strip(), number + 1, []
            elif language is not None and line.startswith("```"):
                blocks.append((language, heading, start, "".join(code)))
                language = None
            elif language is not None:
                code.append(line)
    assert language is None, "README.md has an unclosed code block"
    return blocks


def sh_commands(code: str) -> list[str]:
    """The commands of a sh block: its lines with their `\\` continuations, comment-only lines left out."""
    commands, pending = [], ""
    for line in code.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if not line.endswith("\\"):
            commands.append(pending.rstrip("\n"))
            pending = ""
    assert not pending, f"a sh block ends in a continuation: {pending!r}"
    return commands


def bare(command: str) -> str:
    """A command on one line without its comments (what SKIPPED_SH and SH_CHECKS match)."""
    return " ".join(re.sub(r"\s+#.*", "", line).strip().removesuffix("\\").strip() for line in command.splitlines())


def skip_reason(command: str) -> str | None:
    return next((reason for pattern, reason in SKIPPED_SH if re.search(pattern, bare(command))), None)


def run_cells(code: str, first_line: int, namespace: dict) -> dict:
    """Execute a python block in `namespace` statement by statement; return each expression
    statement's value, keyed by its text (the README line without its comment). Tracebacks name
    README.md's line numbers."""
    source = "\n" * (first_line - 1) + code
    values = {}
    for statement in ast.parse(source, README).body:
        text = ast.get_source_segment(source, statement)
        if isinstance(statement, ast.Expr):
            values[text] = eval(compile(ast.Expression(statement.value), README, "eval"), namespace)
        else:
            exec(compile(ast.Module([statement], []), README, "exec"), namespace)
    return values


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tokenizer):
    """A working directory with the files "Translating files" translates, `runs/demo`, `runs/small`
    and `DIR`: the same model dir, an untrained tiny model in 5 checkpoints (`average --last 5` needs
    them), trained on the fixture TSV (whose last 2%, 8 pairs, `evaluate` scores)."""
    path = tmp_path_factory.mktemp("readme")
    demo = ModelDir(str(path / "runs" / "demo"))
    config = kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, max_length=24)
    demo.write(config, kt.TrainingConfig(), str(FIXTURE), tokenizer)
    model = kt.Transformer(config)
    model.build()
    manager = demo.checkpoint_manager(tf.train.Checkpoint(model=model))
    for step in range(1, 6):
        manager.save(checkpoint_number=step)
    for copy in ("runs/small", "DIR"):
        shutil.copytree(demo.path, path / copy)
    write_marian(path / "opus-mt-en-de", fixture_spm())  # "Start from a pretrained model": a tiny OPUS-MT model
    for name, text in {"messages.po": PO, "app.xlf": XLIFF12, "film.srt": SRT, "page.html": HTML}.items():
        (path / name).write_text(text, encoding="utf-8")  # "Translating files"
    return path


# What the python blocks leave to the reader.
SOURCE_IDS = [[5, 6, 7, 2], [8, 9, 2, 0]]  # [batch 2, S 4] int32, EOS 2, pad 0
TARGET_IN_IDS = [[1, 10, 11, 12], [1, 13, 14, 0]]  # start 1, then the target
TARGET_OUT_IDS = [[10, 11, 12, 2], [13, 14, 2, 0]]  # the target, then EOS


def provide_training_inputs(namespace):
    source_ids = tf.constant(SOURCE_IDS, tf.int32)
    target_in_ids = tf.constant(TARGET_IN_IDS, tf.int32)
    target_out_ids = tf.constant(TARGET_OUT_IDS, tf.int32)
    namespace["batches"] = tf.data.Dataset.from_tensors(((source_ids, target_in_ids), target_out_ids))
    namespace.update(source_ids=source_ids, target_in_ids=target_in_ids)


def check_translate(values, namespace):
    one = values['translator.translate("Jesus wept.")']
    assert isinstance(one, str)  # a str -> a str
    two = values['translator.translate(["Jesus wept.", "Amen."])']
    translator = namespace["translator"]
    assert two == [one, translator.translate("Amen.")]  # a list -> a list, in order
    nbest = values['translator.translate_nbest("Jesus wept.", n=4)']
    assert len(nbest) == 4 and all(isinstance(text, str) and isinstance(score, float) for text, score in nbest)
    scores = [score for _, score in nbest]
    assert scores == sorted(scores, reverse=True) and nbest[0][0] == one  # best first
    evaluated = namespace["scores"]  # kt.evaluate of the first 100 held-out verses
    first = kt.read_pairs("bible-en-de", "test", limit=3)[0]
    assert evaluated["sentences"] == len(evaluated["translations"]) == 100
    assert evaluated["translations"][:3] == translator.translate(first)
    bleu, chrf, examples = values['scores["bleu"], scores["chrf"], scores["translations"][:3]']
    assert (bleu, chrf, examples) == (evaluated["bleu"], evaluated["chrf"], evaluated["translations"][:3])


def check_documents(values, namespace):
    translator = namespace["translator"]
    document = values['translator.translate("Jesus wept.  Amen.\\n\\nIn the beginning.", split=True)']
    one, two, three = translator.translate(["Jesus wept.", "Amen.", "In the beginning."])
    assert document == f"{one}  {two}\n\n{three}"  # 3 translations, "  " and "\n\n" kept


def check_training(values, namespace):
    assert all(callable(getattr(kt.TransformerConfig, preset)) for preset in ("big", "small", "tiny"))  # also ...
    assert isinstance(namespace["model"], keras.Model)  # a keras.Model
    history = values["model.fit(batches, epochs=10)"]
    assert history.epoch == list(range(10)) and all(math.isfinite(loss) for loss in history.history["loss"])
    assert namespace["logits"].shape == (2, 4, 37000)  # [batch, target_len, vocab]


def token_log_probs(model, source_ids, ids):
    """Teacher-forced log-probabilities of hypotheses `ids` [B, N, L]: [B, N, L] float64."""
    batch, n, length = ids.shape
    sources = np.repeat(np.asarray(source_ids), n, axis=0)  # [B*N, S]
    flat = ids.reshape(batch * n, length)  # [B*N, L]
    target_in = np.concatenate([np.ones((batch * n, 1), np.int32), flat[:, :-1]], axis=1)  # start 1, then ids
    logits = model((tf.constant(sources), tf.constant(target_in)), training=False)  # [B*N, L, V]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1).numpy().astype(np.float64)
    chosen = np.take_along_axis(log_probs, flat[:, :, None].astype(np.int64), axis=-1)[..., 0]  # [B*N, L]
    best = log_probs.max(axis=-1)  # [B*N, L]
    return chosen.reshape(batch, n, length), best.reshape(batch, n, length)


def hypotheses(ids) -> list[list[list[int]]]:
    """ids [B, N, L] -> per sentence, per hypothesis, its tokens up to its EOS (pad after EOS checked)."""
    out = []
    for sentence in np.asarray(ids).tolist():
        out.append([])
        for row in sentence:
            end = row.index(2) + 1 if 2 in row else row.index(0) if 0 in row else len(row)  # EOS or the limit
            assert all(token == 0 for token in row[end:]), row  # pad (0) after EOS (2), or after the limit
            assert 0 not in row[:end] and 1 not in row[:end], row  # pad and start are never generated
            out[-1].append(row[:end])
    return out


def check_result(result, batch, beam):
    assert result.ids.dtype == tf.int32 and result.scores.dtype == tf.float32
    assert tuple(result.ids.shape[:2]) == (batch, beam) and tuple(result.scores.shape) == (batch, beam)
    scores = result.scores.numpy()
    assert np.all(np.isfinite(scores)) and np.all(np.diff(scores, axis=1) <= 0), scores  # descending
    return hypotheses(result.ids)


def check_decoding(values, namespace):
    model, source_ids = namespace["model"], namespace["source_ids"]
    result = namespace["result"]
    assert values["result.ids"] is result.ids and values["result.scores"] is result.scores
    best_first = check_result(result, 2, 4)
    # scores: the sum of token log-probs / lp(|y|), lp = ((5 + |y|) / 6)^0.6, |y| counting EOS.
    chosen, _ = token_log_probs(model, source_ids, result.ids.numpy())
    for b, sentence in enumerate(best_first):
        for k, tokens in enumerate(sentence):
            expected = chosen[b, k, : len(tokens)].sum() / ((5 + len(tokens)) / 6) ** 0.6
            assert result.scores[b, k].numpy() == pytest.approx(expected, abs=1e-3)
    one_best = values["kt.beam_search(model, source_ids, nbest=1)"]
    assert [sentence[0] for sentence in best_first] == [s[0] for s in check_result(one_best, 2, 1)]
    exact = values["kt.beam_search(model, source_ids, patience=None)"]
    check_result(exact, 2, 4)
    assert np.all(exact.scores[:, 0].numpy() >= result.scores[:, 0].numpy() - 1e-5)  # searches at least as long
    check_result(values['kt.beam_search(model.with_dtype("bfloat16"), source_ids)'], 2, 4)
    check_result(values["kt.beam_search(model.with_int8(), source_ids)"], 2, 4)
    greedy = values["kt.greedy_search(model, source_ids)"]
    greedy_tokens = check_result(greedy, 2, 1)  # ids [batch, 1, length]
    chosen, best = token_log_probs(model, source_ids, greedy.ids.numpy())
    for b, (tokens,) in enumerate(greedy_tokens):  # each token the most likely one; alpha 0: lp = 1
        np.testing.assert_allclose(chosen[b, 0, : len(tokens)], best[b, 0, : len(tokens)], atol=1e-4)
        assert greedy.scores[b, 0].numpy() == pytest.approx(chosen[b, 0, : len(tokens)].sum(), abs=1e-3)


def check_control(values, namespace):
    translator, banning, first = namespace["translator"], namespace["banning"], namespace["first"]
    verse = namespace["verse"]
    assert first in translator.decode(verse, 1)[0].numpy()  # the model emits it without the modifier
    assert first not in banning.decode(verse, 1)[0].numpy()  # and never with it
    assert values['banning.translate("Jesus wept.")'] != translator.translate("Jesus wept.")
    served = values[
        'tf.saved_model.load(paths["saved_model"]).signatures["serving_default"](text=tf.constant(["Jesus wept."]))'
    ]
    assert [served["translation"].numpy()[0].decode("utf-8")] == [values['banning.translate("Jesus wept.")']]
    result = values["kt.beam_search(model, source_ids, no_repeat_ngram_size=2, min_decoding_length=5)"]
    for sentence in hypotheses(result.ids):
        for tokens in sentence:
            bigrams = list(zip(tokens, tokens[1:]))
            assert len(bigrams) == len(set(bigrams)) and len(tokens) >= 6, tokens  # 5 tokens before EOS


# {heading: (provide the reader's inputs, check what the comments promise)}; other blocks just run.
PYTHON_BLOCKS = {
    "Translate from Python": (None, check_translate),
    "Translating documents": (None, check_documents),
    "The Python API: training": (provide_training_inputs, check_training),
    "Decoding": (None, check_decoding),
    "The search, and a control of your own": (None, check_control),
}


def test_every_block_is_run_or_skipped_by_name():
    blocks = readme_blocks()
    python = [heading for language, heading, _, _ in blocks if language == "python"]
    assert set(SKIPPED_PYTHON) <= set(python) and set(PYTHON_BLOCKS) <= set(python), python
    assert not set(SKIPPED_PYTHON) & set(PYTHON_BLOCKS)
    commands = [bare(c) for language, _, _, code in blocks if language == "sh" for c in sh_commands(code)]
    for pattern, _ in SKIPPED_SH:  # no stale rule
        assert any(re.search(pattern, command) for command in commands), pattern
    for pattern in SH_CHECKS:
        assert any(re.search(pattern, command) for command in commands), pattern
    # text blocks (the layout) are not code; a new language must be run or skipped here
    assert {language for language, *_ in blocks} == {"python", "sh", "text"}


@pytest.mark.slow
def test_python_blocks_run_as_written(workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    namespace, ran = {"__name__": "__readme__"}, []
    for language, heading, first_line, code in readme_blocks():
        if language != "python" or heading in SKIPPED_PYTHON:
            continue
        provide, check = PYTHON_BLOCKS.get(heading, (None, None))
        if provide:
            provide(namespace)
        start = time.perf_counter()
        values = run_cells(code, first_line, namespace)
        if check:
            check(values, namespace)
        ran.append(heading)
        print(f"{heading}: {time.perf_counter() - start:.1f} s")
    assert set(PYTHON_BLOCKS) <= set(ran)  # every check ran


def check_version(result, workspace):
    assert result.stdout.startswith(f"keras-transformer {kt.__version__}\nusage: keras-transformer train")


def check_one_line(result, workspace):
    assert len(result.stdout.splitlines()) == 1  # one line per input


def check_nbest(result, workspace):
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [index for index, _, _ in lines] == ["0"] * 4  # 4 lines per input: INDEX<TAB>SCORE<TAB>TEXT
    scores = [float(score) for _, score, _ in lines]
    assert scores == sorted(scores, reverse=True)


def check_alternatives(result, workspace):
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [index for index, _, _ in lines] == ["0"] * 3  # 3 lines: INDEX<TAB>SCORE<TAB>TEXT
    assert len({text for _, _, text in lines}) == 3 and all(text.startswith("Da") for _, _, text in lines)


def check_evaluate(result, workspace):
    scores = json.loads(result.stdout.splitlines()[-1])  # ends with one JSON line
    assert {"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences", "beam_size", "alpha"} <= set(scores)
    assert scores["sentences"] == 8


def check_averaged(result, workspace):
    assert os.path.exists(workspace / "DIR" / "averaged" / "ckpt-5.index")  # writes DIR/averaged


def check_import(result, workspace):
    assert result.stdout.splitlines()[0] == "model_dir\truns/opus-mt-en-de"


def check_fine_tuned(result, workspace):
    """The import's architecture and vocabulary, no flag repeating them, on the software messages."""
    imported = ModelDir(str(workspace / "runs" / "opus-mt-en-de"))
    tuned = ModelDir(str(workspace / "runs" / "opus-software"))
    assert tuned.read()["model"] == imported.read()["model"]
    assert tuned.tokenizer().model_proto == imported.tokenizer().model_proto
    assert tuned.read()["data_config"].data == "software-en-de" and tuned.resolve_checkpoint("latest")


def check_document(result, workspace):
    assert len(result.stdout.splitlines()) == 1  # one line per input line, its sentences in it


def check_glossary(result, workspace):
    assert "König" in result.stdout and len(result.stdout.splitlines()) == 1


def check_markup(result, workspace):
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"[^<{]*<b>[^<{]*</b>[^<{]*\{name\}[^<{]*", lines[0]), lines


def check_ctranslate2(result, workspace):
    assert os.path.exists(workspace / "runs" / "ct2" / "model.bin")


# Checks beyond exit status 0, by a regex on the command; each must match a README command.
SH_CHECKS = {
    r"--version; keras-transformer train --help": check_version,
    r'translate --model-dir (runs/small|DIR) "Jesus wept\."': check_one_line,
    r"--beam-size 1 --alpha 0": check_one_line,
    r"--nbest 4": check_nbest,
    r"--alternatives 3": check_alternatives,
    r"--no-repeat-ngram-size 3": check_one_line,
    r"--glossary": check_glossary,
    r"\| keras-transformer translate --model-dir runs/small$": check_document,
    r"--no-split": check_one_line,
    r"<b>here</b>": check_markup,
    r"^keras-transformer evaluate": check_evaluate,
    r"average --model-dir DIR --last 5": check_averaged,
    r"--format ctranslate2": check_ctranslate2,
    r"^keras-transformer import --from marian": check_import,
    r"train --init-from runs/opus-mt-en-de ": check_fine_tuned,
}


# The sh blocks with a command that no skip rule matches (a block of skipped commands only is no test).
SH_BLOCKS = [
    (heading, code)
    for language, heading, _, code in readme_blocks()
    if language == "sh" and any(skip_reason(command) is None for command in sh_commands(code))
]


@pytest.mark.slow
@pytest.mark.parametrize("heading,code", SH_BLOCKS, ids=[heading for heading, _ in SH_BLOCKS])
def test_sh_commands_run_as_written(workspace, heading, code):
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),  # keras-transformer
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),  # this checkout
    }
    skipped, ran = [], []
    for command in sh_commands(code):
        reason = skip_reason(command)
        if reason:
            skipped.append(f"{bare(command)}: {reason}")
            continue
        start = time.perf_counter()
        result = subprocess.run(
            ["bash", "-c", with_tiny_settings(command)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        for pattern, check in SH_CHECKS.items():
            if re.search(pattern, bare(command)):
                check(result, workspace)
        ran.append(f"{bare(command)}: {time.perf_counter() - start:.1f} s")
    print("\n".join(ran + ["skipped: " + line for line in skipped]))
    assert ran, f"{heading}: nothing ran"


# The citations of bench/: every figure names the command that measures it and the bench/RESULTS.md
# section that holds it, as `bench/RESULTS.md, "Heading"` (a `##` or `###` heading, exactly); history
# is `bench/JOURNAL.md, "Heading"` (a heading, or its dated part before ": ").
BENCH = os.path.join(ROOT, "bench")
CITED_IN = ["README.md", "export/README.md", "bench/README.md", "Makefile", "keras_transformer/**/*.py"]
CITED_IN += ["bench/*.py", "bench/*.sh", "tests/*.py"]
CITATION = re.compile(r'bench/(RESULTS|JOURNAL)\.md(?![#\w])(,\s+"([^"]+)")?')
SECTION = re.compile(r'bench/RESULTS\.md,\s+"[^"]+"')
ANCHOR = re.compile(r"bench/(RESULTS|JOURNAL)\.md#([\w-]+)")
# a script and its subcommand: after `python`, or at the start of a code span
COMMAND = re.compile(r"(?:python3?\s+|`)(?:bench/)?(\w+)\.py[ \t\n]+([a-z][\w-]*)")
SCRIPT = re.compile(r"(?<![\w/.-])bench/([\w./-]+\.(?:py|sh|md|png))")
FIGURE = re.compile(
    r"\b\d+(?:\.\d+)?x\b|\d\s(?:target\s)?(?:tokens|pairs|sentences)/s\b|\d\s?[GT]FLOP/s|\b\d+\.\d+\s?m?s\b|\b\d+\s?ms\b"
    r"|\b(?:BLEU|chrF)\b[^.;:|\n]{0,30}?\d+\.\d+|\d+\.\d+ (?:BLEU|chrF)\b|\d%\sMFU"
    r"|^\|[^\n]*\b(?:BLEU|chrF|tokens/s|latency)\b[^\n]*\|\n\|[ :|-]+\|$",  # a table of such figures
    re.MULTILINE,
)


def cited_files() -> dict[str, str]:
    import glob

    names = [name for pattern in CITED_IN for name in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    names = [name for name in names if os.path.basename(name) != "test_readme.py"]  # the rule itself
    return {os.path.relpath(name, ROOT): open(name, encoding="utf-8").read() for name in sorted(set(names))}


def headings(name: str) -> list[str]:
    with open(os.path.join(BENCH, name), encoding="utf-8") as f:
        return [line.lstrip("#").strip() for line in f if re.match(r"#{2,3} ", line)]


def one_line(text: str) -> str:
    """A citation wrapped over lines of a comment or docstring, on one line."""
    return " ".join(re.sub(r"\n\s*#?", " ", text).split())


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_cited_results_section_exists():
    sections = {"RESULTS": headings("RESULTS.md"), "JOURNAL": headings("JOURNAL.md")}
    assert len(set(sections["RESULTS"])) == len(sections["RESULTS"]), "RESULTS.md repeats a heading"
    wrong = []
    for name, text in cited_files().items():
        for match in CITATION.finditer(text):
            kind, section = match.group(1), match.group(3) and one_line(match.group(3))
            if kind == "RESULTS":
                found = sections[kind].count(section)
            else:
                found = sum(section in (heading, heading.split(": ")[0]) for heading in sections[kind])
            if found != 1:
                wrong.append(f"{name}: {match.group(0)!r}")
        for kind, anchor in ANCHOR.findall(text):
            if anchor not in {slug(heading) for heading in sections[kind]}:
                wrong.append(f"{name}: bench/{kind}.md#{anchor}")
    assert wrong == [], "name no section, or no one section, of RESULTS.md or JOURNAL.md: " + "; ".join(wrong)


def subcommands(script: str) -> set[str] | None:
    """The subcommands of bench/`script`.py (its COMMANDS' keys), None when it has none."""
    tree = ast.parse(open(os.path.join(BENCH, f"{script}.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["COMMANDS"]:
            return {key.value for key in node.value.keys}
    return None


def test_every_cited_bench_command_exists():
    files = {**cited_files(), "bench/RESULTS.md": open(os.path.join(BENCH, "RESULTS.md"), encoding="utf-8").read()}
    scripts = {name[:-3] for name in os.listdir(BENCH) if name.endswith(".py")}
    missing = []
    for name, text in files.items():
        missing += [f"{name}: bench/{path}" for path in SCRIPT.findall(text) if not os.path.exists(f"{BENCH}/{path}")]
        for script, word in COMMAND.findall(text):
            if script in scripts and (commands := subcommands(script)) is not None and word not in commands:
                missing.append(f"{name}: {script}.py {word}")
    assert missing == []


def readme_units(text: str) -> list[str]:
    """README.md's prose as units that a figure and its citations share: a paragraph, a list item (with
    its indented lines), or a table with the paragraph before it; code blocks and headings left out."""
    units, unit, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        starts = line.startswith(("```", "#", "- ", "* ")) or re.match(r"\d+\. ", line) or not line.strip()
        if fenced or starts:
            units.append("\n".join(unit))
            unit = []
        if fenced or line.startswith(("```", "#")) or not line.strip():
            continue
        if line.startswith("|") and not unit and units and units[-1] and not units[-1].startswith("#"):
            unit = units.pop().split("\n")  # a table's first row: with the paragraph before it
        unit.append(line)
    units.append("\n".join(unit))
    return [unit for unit in units if unit]


def test_every_readme_figure_names_its_command_and_results_section():
    """A speed or quality figure (1.6x, tokens/s, BLEU 17.18, 0.3 s, ...) sits beside the command that
    measures it (`bench/...` or `keras-transformer ...`) and its bench/RESULTS.md section."""
    with open(README, encoding="utf-8") as f:
        units = readme_units(f.read())
    unbacked = [
        unit
        for unit in units
        if FIGURE.search(unit)
        and not (re.search(r"bench/\w+\.(py|sh)|keras-transformer \w", unit) and SECTION.search(unit))
    ]
    assert unbacked == [], "\n\n".join(unbacked)


# A citation that a figure's numbers must appear in: `bench/RESULTS.md, "Heading"` or
# `bench/JOURNAL.md, "Heading"` (wrapped over lines as prose wraps it).
CITED_SECTION = re.compile(r'bench/(RESULTS|JOURNAL)\.md,\s+"([^"]+)"')
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def section_texts(name: str) -> dict[str, str]:
    """{heading: its text} of bench/`name`'s `##` and `###` sections; a `##` section's text holds its
    `###` subsections'."""
    texts, open_sections = {}, []  # [(level, heading)]
    with open(os.path.join(BENCH, name), encoding="utf-8") as f:
        for line in f:
            if match := re.match(r"(#{2,3}) (.*)", line):
                level = len(match.group(1))
                open_sections = [(lvl, heading) for lvl, heading in open_sections if lvl < level]
                open_sections.append((level, match.group(2).strip()))
                texts.setdefault(match.group(2).strip(), "")
                continue
            for _, heading in open_sections:
                texts[heading] += line
    return texts


def cited_text(unit: str) -> str:
    """The text of every section that `unit` cites: a RESULTS heading exactly, a JOURNAL heading or
    its dated part before ": "."""
    sections = {"RESULTS": section_texts("RESULTS.md"), "JOURNAL": section_texts("JOURNAL.md")}
    texts = []
    for kind, section in CITED_SECTION.findall(unit):
        section = one_line(section)
        texts += [
            text
            for heading, text in sections[kind].items()
            if section == heading or (kind == "JOURNAL" and section == heading.split(": ")[0])
        ]
    return "\n".join(texts)


def figure_numbers(unit: str) -> list[str]:
    """The numbers of each figure (`FIGURE`) of `unit`: the whole number ("2,100" of "2,100 target
    tokens/s", "1.82" of "1.07-1.82x"), and every number in the rows of a table of figures."""
    numbers = []
    for match in FIGURE.finditer(unit):
        start = match.start()
        while start and (
            unit[start - 1].isdigit() or (unit[start - 1] in ".," and unit[start - 2 : start - 1].isdigit())
        ):
            start -= 1
        text = unit[start : match.end()]
        if text.startswith("|"):  # a table: its rows after the header and the rule
            text = "\n".join([line for line in unit.splitlines() if line.startswith("|")][2:])
        numbers += NUMBER.findall(text)
    return numbers


@pytest.mark.parametrize("name", ["README.md", "export/README.md"])
def test_every_figure_appears_verbatim_in_a_section_it_cites(name):
    """Each number of a speed or quality figure, as printed, is in a bench/RESULTS.md (or, for
    history, bench/JOURNAL.md) section that the figure's paragraph, list item or table cites: a
    figure that no section holds, or one rounded or recomputed on the way, fails."""
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        units = readme_units(f.read())
    unbacked = []
    for unit in units:
        cited = cited_text(unit)
        missing = sorted(
            {n for n in figure_numbers(unit) if not re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d]|[.,]\d)", cited)}
        )
        if missing:
            unbacked.append(f"{', '.join(missing)} not in the sections cited by: {unit[:160]!r}")
    assert unbacked == [], "\n".join(unbacked)
