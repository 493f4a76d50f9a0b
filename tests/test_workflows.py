"""Training workflows (the README's "Training workflows"): the embedded software-en-de corpus,
weighted sources, early stopping, a moving average of the weights, fine-tuning from another
model dir, and recipes as files.

The models trained here have one layer each side (`TINY`): no workflow depends on depth, and a
layer less halves every trace."""

import dataclasses
import gzip
import hashlib
import json
import math
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, FIXTURE

from keras_transformer.cli.flags import read_recipe, train_configs
from keras_transformer.cli.main import main, parser
from keras_transformer.config import SOFTWARE_EN_DE, DataConfig, TrainingConfig, TransformerConfig, weighted_sources
from keras_transformer.data.files import has_own_splits, split_files
from keras_transformer.data.mixing import tokenizer_sentences, training_pairs, validation_pairs
from keras_transformer.data.sources import read_pairs
from keras_transformer.data.splits import near_duplicate_key, software_split, split_source
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.model_dir import ModelDir, ModelDirError, load_model
from keras_transformer.model_dir.checkpoints import save_weights
from keras_transformer.training.callbacks.early_stopping import EarlyStopping
from keras_transformer.training.preparation import initial_weights, shared_pieces
from keras_transformer.training.trainer import train
from keras_transformer.translation.translator import Translator

QUIET = dict(verbose=0, log=lambda message: None)
TINY = TransformerConfig.tiny(vocab_size=300, num_layers=1)


def tiny_training(**overrides):
    return TrainingConfig(**{"batch_tokens": 512, "warmup_steps": 10, "steps_per_epoch": 3, **overrides})


# software-en-de


def test_near_duplicate_key_drops_case_placeholders_numbers_punctuation_and_plurals():
    assert near_duplicate_key("Delete %(count)s Items!") == "delete item"
    assert near_duplicate_key("delete {0} item") == "delete item"
    assert near_duplicate_key("<b>Address</b> book: 3") == near_duplicate_key("Address Book") == "address book"


def test_software_en_de_is_split_so_that_near_duplicates_stay_together():
    splits = {split: read_pairs(SOFTWARE_EN_DE, split) for split in ("train", "validation", "test")}
    assert {split: len(pairs[0]) for split, pairs in splits.items()} == {"train": 17893, "validation": 610, "test": 606}
    keys = {split: {near_duplicate_key(source) for source in pairs[0]} for split, pairs in splits.items()}
    assert not keys["train"] & keys["validation"] and not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]
    for split, (sources, _) in splits.items():  # the shipped files are what the rule gives
        assert {software_split(source) for source in sources} == {split}
    where = {source: split for split, (sources, _) in splits.items() for source in sources}
    assert where["Address book"] == where["Address Book"] and where["Address '%s' deleted"] == where["Address deleted"]
    assert has_own_splits(SOFTWARE_EN_DE)
    assert split_source(DataConfig(data=SOFTWARE_EN_DE), "validation") == (SOFTWARE_EN_DE, "validation")
    assert len(read_pairs(SOFTWARE_EN_DE, "all")[0]) == 19109


def test_software_en_de_files_are_reproducible():
    """gzip without a timestamp: the tool that writes them gives the same bytes for the same text."""
    path = split_files(SOFTWARE_EN_DE, "test")[0]
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[4:8] == b"\0\0\0\0"  # the gzip header's mtime
    assert gzip.decompress(raw).decode("utf-8").count("\n") == 606


# Weighted sources


def test_weighted_sources_are_parsed_and_checked():
    assert weighted_sources("bible-en-de:0.3,software-en-de:0.7") == (("bible-en-de", 0.3), ("software-en-de", 0.7))
    assert weighted_sources("a.tsv:1,b.tsv:3") == (("a.tsv", 0.25), ("b.tsv", 0.75))
    assert weighted_sources("tfds:wmt14_translate/de-en") == (("tfds:wmt14_translate/de-en", 1.0),)
    assert weighted_sources("a.tsv,b.tsv") == (("a.tsv,b.tsv", 1.0),)  # one source of two files
    with pytest.raises(ValueError, match="weighted sources need a weight on every source"):
        DataConfig(data="bible-en-de:0.3,software-en-de")
    with pytest.raises(ValueError, match="source weights must be > 0"):
        DataConfig(data="bible-en-de:0,software-en-de:1")
    with pytest.raises(ValueError, match="a source is named twice"):
        DataConfig(data="bible-en-de:1,bible-en-de:2")


def test_weighted_sources_are_drawn_in_proportion():
    data = DataConfig(data="bible-en-de:0.3,software-en-de:0.7")
    software = set(read_pairs(SOFTWARE_EN_DE, "train")[0])
    draws = 20_000
    stream = training_pairs(data, seed=5, shuffle_buffer=2000).take(draws).batch(4096)
    from_software = sum(
        sum(source.decode("utf-8") in software for source in sources) for sources, _ in stream.as_numpy_iterator()
    )
    bound = 4 * math.sqrt(draws * 0.7 * 0.3)  # four binomial standard deviations (~0.006% two-sided)
    assert abs(from_software - 0.7 * draws) < bound, from_software
    # Validation: every source's validation split (valid_pairs / 2 each at most).
    validation = list(validation_pairs(data).as_numpy_iterator())
    assert len(validation) == 290 + 610
    software_validation = set(read_pairs(SOFTWARE_EN_DE, "validation")[0])
    assert sum(source.decode("utf-8") in software_validation for source, _ in validation) == 610


def test_the_tokenizer_sample_follows_the_weights():
    data = DataConfig(data="bible-en-de:0.3,software-en-de:0.7")
    texts = list(tokenizer_sentences(data, 1000, seed=1))
    software = set(read_pairs(SOFTWARE_EN_DE, "train")[0])
    sources = texts[0::2]
    assert len(sources) == 1000 and sum(source in software for source in sources) == 700
    # A source smaller than its share: every share shrinks with it, the proportion stays.
    small = DataConfig(data=f"{FIXTURE}:0.5,software-en-de:0.5")  # 384 training pairs in the fixture
    sources = list(tokenizer_sentences(small, 1000, seed=1))[0::2]
    assert len(sources) == 2 * 384 and sum(source in software for source in sources) == 384


# Early stopping


def stepping_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def run_evaluations(callback, model, scores, monitor="val_loss", first_epoch=0):
    """Epoch e: 10 (e + 1) steps, every weight = e, logs {monitor: scores[e]} (None: no evaluation)."""
    callback.set_model(model)
    for epoch, score in enumerate(scores, first_epoch):
        model.optimizer.iterations.assign(10 * (epoch + 1))
        for weight in model.weights:
            weight.assign(np.full(weight.shape, epoch, weight.dtype))
        callback.on_epoch_end(epoch, {} if score is None else {monitor: score})
        if model.stop_training:
            return epoch
    return None


def test_early_stopping_on_the_loss_stops_after_patience_evaluations_and_keeps_the_best(tmp_path):
    record, best = str(tmp_path / "early_stopping.json"), str(tmp_path / "best")
    model = stepping_model()
    stopping = EarlyStopping("val_loss", 2, record, best, log=lambda message: None)
    assert run_evaluations(stopping, model, [3.0, 2.5, 2.6, 2.4, 2.4, 2.7, 9.0]) == 5  # 2.4 again is no better
    assert json.load(open(record)) == {"monitor": "val_loss", "best": 2.4, "step": 40, "waited": 2}
    assert json.load(open(os.path.join(best, "val_loss.json"))) == {"step": 40, "val_loss": 2.4}
    restored = stepping_model()
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(best)).expect_partial()
    assert all(np.all(w.numpy() == 3) for w in restored.weights)  # epoch 3's weights
    assert EarlyStopping("val_loss", 2, record, best).exhausted
    assert not EarlyStopping("val_loss", 3, record, best).exhausted  # more patience: go on


def test_early_stopping_on_bleu_counts_evaluations_only_and_resumes(tmp_path):
    record = str(tmp_path / "early_stopping.json")
    model = stepping_model()
    first = EarlyStopping("val_bleu", 2, record, log=lambda message: None)
    assert run_evaluations(first, model, [None, 10.0, None, 9.0], "val_bleu") is None  # one without improvement
    resumed = EarlyStopping("val_bleu", 2, record, log=lambda message: None)  # a restart counts on
    model.stop_training = False
    assert run_evaluations(resumed, model, [None, 10.0], "val_bleu", first_epoch=4) == 5
    assert json.load(open(record)) == {"monitor": "val_bleu", "best": 10.0, "step": 20, "waited": 2}
    assert not os.path.exists(tmp_path / "best")  # BleuCallback keeps best/ for BLEU


class ScriptedScores(keras.callbacks.Callback):
    """Overwrites the validation loss of epoch e with scores[e]."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def on_epoch_end(self, epoch, logs=None):
        logs["val_loss"] = self.scores[epoch]


# Slow (issue 50 item 10): `make test` counts the evaluations on the callback itself (the two tests above).
@pytest.mark.slow
def test_train_stops_early_at_the_right_evaluation(tmp_path):
    model_dir = str(tmp_path / "model")
    training = tiny_training(steps_per_epoch=2, max_steps=40, early_stopping=2)
    scripted = ScriptedScores([5.0, 4.0, 4.5, 4.6, 1.0, 1.0])
    model = train(model_dir, TINY, training, str(FIXTURE), callbacks=[scripted], **QUIET)
    assert int(model.optimizer.iterations.numpy()) == 8  # the 4th evaluation was the 2nd without improvement
    directory = ModelDir(model_dir)
    assert tf.train.latest_checkpoint(directory.weights_dir("best")).endswith("ckpt-4")
    assert tf.train.latest_checkpoint(directory.checkpoint_dir).endswith("ckpt-8")
    lines = []
    train(model_dir, TINY, training, str(FIXTURE), verbose=0, log=lines.append)
    assert any(line.startswith("stopped early before: no better val_loss in 2 evaluation(s)") for line in lines)


# A moving average of the weights


class RecordWeights(keras.callbacks.Callback):
    """The trainable weights after every optimizer step, in float64."""

    def __init__(self):
        super().__init__()
        self.after_step = []

    def on_train_batch_end(self, batch, logs=None):
        self.after_step.append([np.asarray(v.numpy(), np.float64) for v in self.model.trainable_variables])


def hand_ema(steps, decay, average=None):
    """average_1 = w_1; average_t = D average_{t-1} + (1 - D) w_t."""
    for weights in steps:
        average = weights if average is None else [decay * a + (1 - decay) * w for a, w in zip(average, weights)]
    return average


def assert_weights(model, expected):
    for variable, value in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """A tiny run with --ema-decay 0.5: 3 steps, then resumed to 6; the weights after every step."""
    model_dir = str(tmp_path_factory.mktemp("ema") / "model")
    first, second = RecordWeights(), RecordWeights()
    train(model_dir, TINY, tiny_training(max_steps=3, ema_decay=0.5), str(FIXTURE), callbacks=[first], **QUIET)
    ema_at_3 = load_model(model_dir, "ema")[0]
    model = train(model_dir, TINY, tiny_training(max_steps=6, ema_decay=0.5), str(FIXTURE), callbacks=[second], **QUIET)
    return model_dir, first.after_step, second.after_step, ema_at_3, model


def test_the_ema_weights_are_the_hand_computed_average_and_survive_a_resume(ema_run):
    model_dir, first, second, ema_at_3, model = ema_run
    assert len(first) == len(second) == 3
    assert_weights(ema_at_3, hand_ema(first, 0.5))
    ema_at_6 = load_model(model_dir, "ema")[0]
    assert_weights(ema_at_6, hand_ema(second, 0.5, hand_ema(first, 0.5)))  # the resumed run went on averaging
    latest = load_model(model_dir, "latest")[0]
    assert_weights(latest, second[-1])  # the raw weights: checkpoints/ and the model train() returns
    assert_weights(model, second[-1])
    assert not np.allclose(ema_at_6.trainable_variables[0].numpy(), latest.trainable_variables[0].numpy())


def test_translate_evaluate_export_and_average_take_the_ema_checkpoint(ema_run, tmp_path, capsys):
    model_dir = ema_run[0]
    assert main(["translate", "--model-dir", model_dir, "--checkpoint", "ema", "--beam-size", "1", "Amen."]) == 0
    assert main(["average", "--model-dir", model_dir, "--checkpoint", "ema", "--last", "2"]) == 0
    averaged = load_model(model_dir, "averaged")[0]
    expected = [
        (a + b) / 2 for a, b in zip(hand_ema(ema_run[1], 0.5), hand_ema(ema_run[2], 0.5, hand_ema(ema_run[1], 0.5)))
    ]
    assert_weights(averaged, expected)
    assert main(["average", "--model-dir", model_dir, "--checkpoint", "ema", "--last", "3"]) == 2
    assert "holds 2 ema checkpoint(s), fewer than the 3 to average" in capsys.readouterr().err


def test_ema_cannot_be_switched_on_when_resuming(trained, tmp_path):
    model_dir = str(tmp_path / "plain")
    shutil.copytree(trained.model_dir, model_dir)  # conftest's, trained without --ema-decay
    config = TransformerConfig.tiny(vocab_size=300)  # its architecture
    before = sorted(os.listdir(model_dir))
    with pytest.raises(ModelDirError, match="trained without --ema-decay"):
        train(model_dir, config, tiny_training(max_steps=40, ema_decay=0.9), str(FIXTURE), **QUIET)
    assert sorted(os.listdir(model_dir)) == before


# Fine-tuning


def tree_digest(path):
    digest = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)):
        for name in sorted(files):
            with open(os.path.join(root, name), "rb") as f:
                digest.update(name.encode() + f.read())
    return digest.hexdigest()


class LogitsAtStart(keras.callbacks.Callback):
    def __init__(self, ids):
        super().__init__()
        self.ids = ids

    def on_train_begin(self, logs=None):
        self.logits = self.model(self.ids, training=False).numpy()
        self.step = int(self.model.optimizer.iterations.numpy())


def test_fine_tuning_starts_from_the_parent_weights_and_leaves_the_parent_untouched(ema_run, tmp_path):
    parent_dir = ema_run[0]
    before = tree_digest(parent_dir)
    ids = (tf.constant([[5, 6, 7, 2]]), tf.constant([[1, 8, 9, 10]]))
    at_start = LogitsAtStart(ids)
    child_dir = str(tmp_path / "child")
    training = tiny_training(max_steps=2, init_from=parent_dir, init_checkpoint="ema", learning_rate_scale=0.1)
    train(child_dir, TransformerConfig.tiny(num_layers=1), training, f"{FIXTURE}", callbacks=[at_start], **QUIET)
    parent_model = load_model(parent_dir, "ema")[0]
    assert at_start.step == 0
    assert np.array_equal(at_start.logits, parent_model(ids, training=False).numpy())
    assert tree_digest(parent_dir) == before
    stored = json.load(open(os.path.join(child_dir, "config.json")))
    assert stored["parent"] == {
        "dir": os.path.abspath(parent_dir),
        "checkpoint": os.path.abspath(tf.train.latest_checkpoint(os.path.join(parent_dir, "ema"))),
        "step": 6,
    }
    with (
        open(os.path.join(child_dir, "tokenizer.model"), "rb") as a,
        open(os.path.join(parent_dir, "tokenizer.model"), "rb") as b,
    ):
        assert a.read() == b.read()
    assert tf.train.latest_checkpoint(os.path.join(child_dir, "checkpoints")).endswith("ckpt-2")  # a fresh optimizer
    # The same command resumes the child from its own checkpoint.
    lines = []
    train(child_dir, TransformerConfig.tiny(num_layers=1), training, f"{FIXTURE}", verbose=0, log=lines.append)
    assert "already trained for 2 steps (--max-steps 2): nothing to do" in lines


def test_fine_tuning_refuses_another_architecture(ema_run, tmp_path):
    training = tiny_training(max_steps=1, init_from=ema_run[0])
    with pytest.raises(
        ModelDirError, match=r"\(num_layers: stored 1 != requested 3\); fine-tuning keeps the parent's architecture$"
    ):
        train(str(tmp_path / "child"), TransformerConfig.tiny(num_layers=3), training, str(FIXTURE), **QUIET)
    assert not os.path.exists(tmp_path / "child")


class WeightsAtStart(keras.callbacks.Callback):
    """Every weight when training begins (after the initial weights are set); which is the
    embedding matrix, and which have the vocabulary's size."""

    def on_train_begin(self, logs=None):
        self.weights = [w.numpy() for w in self.model.weights]
        self.embedding = next(i for i, w in enumerate(self.model.weights) if w is self.model.embedding.embeddings)
        vocab_size = self.model.config.vocab_size
        self.vocab_sized = [i for i, w in enumerate(self.model.weights) if vocab_size in w.shape]


@pytest.fixture(scope="module")
def updated_vocabulary(ema_run, tmp_path_factory):
    """ema_run's model (vocabulary 300) fine-tuned for 1 step on the EN-FR fixture with a 280-piece
    vocabulary learned from it."""
    child_dir = str(tmp_path_factory.mktemp("vocabulary") / "child")
    at_start = WeightsAtStart()
    training = tiny_training(max_steps=1, init_from=ema_run[0], vocabulary="update")
    config = TransformerConfig.tiny(vocab_size=280, num_layers=1)
    train(child_dir, config, training, str(DATA / "fixture_bible.en-fr.tsv"), callbacks=[at_start], **QUIET)
    return child_dir, at_start


# Slow (issue 50 item 10): `make test` maps the rows on a tokenizer pair in the test below.
@pytest.mark.slow
def test_a_vocabulary_update_copies_the_rows_of_the_pieces_both_vocabularies_have(ema_run, updated_vocabulary):
    parent_dir, (child_dir, at_start) = ema_run[0], updated_vocabulary
    parent, parent_tokenizer, _ = load_model(parent_dir)
    child_tokenizer = ModelDir(child_dir).tokenizer()
    parent_ids = {parent_tokenizer.piece(i): i for i in range(parent_tokenizer.vocab_size)}
    pieces = {i: child_tokenizer.piece(i) for i in range(child_tokenizer.vocab_size)}
    shared = {i: parent_ids[piece] for i, piece in pieces.items() if piece in parent_ids}
    assert 4 < len(shared) < child_tokenizer.vocab_size  # the English pieces, not all the French ones
    embedding = at_start.weights[at_start.embedding]
    parent_embedding = parent.embedding.embeddings.numpy()
    assert embedding.shape == (child_tokenizer.vocab_size, 64) == (280, 64) and parent_embedding.shape == (300, 64)
    for child_id, parent_id in shared.items():
        np.testing.assert_array_equal(embedding[child_id], parent_embedding[parent_id])  # exactly the parent's row
    new = sorted(set(range(child_tokenizer.vocab_size)) - set(shared))
    assert 0.02 < embedding[new].std() < 0.25  # N(0, d_model^-1/2 = 0.125), as the initialiser draws them
    # One matrix of the vocabulary's size: the embedding, tied to the output projection (§3.4).
    assert at_start.vocab_sized == [at_start.embedding]
    others = [(a, b) for i, (a, b) in enumerate(zip(at_start.weights, parent.get_weights())) if i != at_start.embedding]
    assert len(others) == len(parent.weights) - 1 and all(np.array_equal(a, b) for a, b in others)
    stored = json.load(open(os.path.join(child_dir, "config.json")))
    assert stored["training"]["vocabulary"] == "update"
    assert stored["parent"]["vocabulary"] == "update" and stored["parent"]["shared_pieces"] == len(shared)
    assert stored["parent"]["vocab_size"] == parent_tokenizer.vocab_size
    assert stored["model"]["vocab_size"] == child_tokenizer.vocab_size
    assert isinstance(Translator.from_model_dir(child_dir, beam_size=1, alpha=0.0).translate("Amen."), str)


def test_a_vocabulary_update_maps_the_output_bias_as_the_embedding_rows(tokenizer, fixture_pairs, tmp_path):
    """With an output bias (a [vocab] weight), a vocabulary update gives each shared piece the parent's
    bias and every new piece 0, the bias's initial value, as it does the embedding's rows."""
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, output_bias=True)
    parent = Transformer(config)
    parent.build()
    parent.embedding.logit_bias.assign(np.random.default_rng(6).normal(size=tokenizer.vocab_size) + 5.0)
    parent_dir = ModelDir(str(tmp_path / "parent"))
    parent_dir.write(config, TrainingConfig(), "fixture", tokenizer)
    checkpoint = save_weights(parent, os.path.join(parent_dir.path, "averaged"), step=1)
    sources, targets = fixture_pairs
    child_tokenizer = SubwordTokenizer.train(sources[:200] + targets[:200], 250)
    child = Transformer(dataclasses.replace(config, vocab_size=child_tokenizer.vocab_size))
    child.build()
    parent_info = {"dir": parent_dir.path, "checkpoint": checkpoint, "vocabulary": "update"}
    child.set_weights(initial_weights(child, parent_info, child_tokenizer))
    rows = shared_pieces(tokenizer, child_tokenizer)  # {child id: parent id}
    assert 4 < len(rows) < child_tokenizer.vocab_size
    bias, parent_bias = child.embedding.logit_bias.numpy(), parent.embedding.logit_bias.numpy()
    np.testing.assert_array_equal(bias[list(rows)], parent_bias[list(rows.values())])
    assert np.all(bias[sorted(set(range(child_tokenizer.vocab_size)) - set(rows))] == 0.0)


def test_a_vocabulary_update_refuses_another_architecture(ema_run, tmp_path):
    training = tiny_training(max_steps=1, init_from=ema_run[0], vocabulary="update")
    with pytest.raises(
        ModelDirError, match=r"\(num_layers: stored 1 != requested 3\); fine-tuning keeps the parent's architecture$"
    ):
        train(str(tmp_path / "child"), TransformerConfig.tiny(num_layers=3), training, str(FIXTURE), **QUIET)


def test_the_vocabulary_flag_is_generated_and_checked():
    assert train_configs(train_args("--vocabulary", "update"), "small")[1].vocabulary == "update"
    assert train_configs(train_args(), "small")[1].vocabulary == "keep"
    with pytest.raises(SystemExit):
        train_args("--vocabulary", "grow")
    with pytest.raises(ValueError, match="vocabulary must be keep or update"):
        TrainingConfig(vocabulary="grow")


# Recipes


def train_args(*argv):
    return parser().parse_args(["train", "--model-dir", "runs/x", *argv])


def recipe_configs(args):
    return train_configs(args, "small")


def test_a_yaml_recipe_sets_flags_and_the_command_line_overrides_it(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "preset: tiny\nmax-steps: 500\nwarmup_steps: 20\ntime_budget: 30m\nnorm_first: true\n"
        "data: bible-en-de:0.3,software-en-de:0.7\n",
        encoding="utf-8",
    )
    model, training, data = recipe_configs(train_args("--config", str(recipe), "--max-steps", "7"))
    assert (model.d_model, model.norm_first) == (64, True)  # the tiny preset, with the recipe's norm_first
    assert (training.max_steps, training.warmup_steps, training.time_budget_s) == (7, 20, 1800.0)
    assert data.data == "bible-en-de:0.3,software-en-de:0.7"


def test_fine_tuning_takes_the_model_settings_from_the_parents_config_json(tmp_path, tokenizer):
    """`train --init-from DIR` needs no flag repeating DIR's architecture (an import's: swish,
    Marian's positions, ...); the training settings stay the preset's, a flag still overrides."""
    model = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, ffn_activation="swish", output_bias=True)
    parent = ModelDir(str(tmp_path / "parent"))
    parent.write(model, TrainingConfig(max_steps=5), DataConfig(), tokenizer)
    config, training, _ = recipe_configs(train_args("--init-from", parent.path))
    assert config == model and training == TrainingConfig.preset("small", init_from=parent.path)
    assert recipe_configs(train_args("--init-from", parent.path, "--dropout", "0.3"))[0].dropout == 0.3
    assert recipe_configs(train_args("--init-from", str(tmp_path / "none")))[0] == TransformerConfig.small()


def test_a_recipe_with_unknown_keys_is_refused_with_their_names(tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"max_steps": 5, "max_stepz": 6, "lr": 1}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"recipe.json: unknown settings: lr, max_stepz$"):
        read_recipe(str(recipe))


def test_a_model_dirs_config_json_is_a_recipe_that_reproduces_its_settings(tmp_path, tokenizer):
    model = TransformerConfig.tiny(vocab_size=400, dropout=0.2)
    training = TrainingConfig(max_steps=123, warmup_fraction=0.1, ema_decay=0.99)
    data = DataConfig(data="bible-en-de:1,software-en-de:1", valid_pairs=50)
    stored = ModelDir(str(tmp_path / "x"))
    stored.write(
        model.__class__(**{**model.to_dict(), "vocab_size": tokenizer.vocab_size}), training, data, tokenizer, 400
    )
    again = recipe_configs(train_args("--config", stored.config_path))
    assert again == (model, training, data)
