"""Markup and placeholders (issue 36 item 2; inference/markup.py, inference/markup_restore.py):
every kind of span found whole, put back by hand-made alignments where the golden outputs say,
never lost, repeated, reordered or altered (a seeded batch of random texts, translations and
alignments), and the Python path, the SavedModel's `translate_markup` and the CLI agree."""

import random

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.inference.markup import plain_text, span_lists
from keras_transformer.inference.markup_restore import restore
from keras_transformer.model_dir import load_model

SPANS = [
    "<b>",
    "</b>",
    "<a href=\"https://example.com/?a=1&b=2\" class='x' data-id=7>",
    "<br/>",
    "<img src=x.png />",
    "<w:t>",
    "&amp;",
    "&#39;",
    "&#x27;",
    "%s",
    "%d",
    "%1$d",
    "%.2f",
    "%-5s",
    "%(name)s",
    "%@",
    "{name}",
    "{0}",
    "{:>3}",
    "{user.name!r}",
    "{count, plural, one {# file} other {# files}}",
    "{gender, select, female {she} other {they}}",
    "$HOME",
    "${VAR}",
    "https://example.com/a?b=c&d=e#f",
    "www.example.org/path",
    "bob.smith+tag@example.co.uk",
]
NOT_SPANS = ["50% of them", "It costs $5.", "if a < b and c > d", "me@home", "Fish & chips", "{ not a field }", "100 %"]


def restored(texts, translations, pharaohs) -> list[str]:
    strings = (tf.constant(values, tf.string) for values in (texts, translations, pharaohs))
    return [text.decode("utf-8") for text in restore(*strings).numpy()]


def plain(texts) -> list[str]:
    return [text.decode("utf-8") for text in plain_text(tf.constant(texts, tf.string)).numpy()]


@pytest.mark.parametrize("span", SPANS)
def test_every_kind_of_span_is_found_whole_and_left_out_of_the_plain_text(span):
    assert span_lists([f"Say {span} now.", f"({span})"]) == [[span], [span]]
    assert plain([f"Say {span} now."]) == ["Say now."]


def test_text_that_only_looks_like_markup_is_text():
    assert span_lists(NOT_SPANS) == [[] for _ in NOT_SPANS]
    assert span_lists(["See https://example.com/a."]) == [["https://example.com/a"]]  # not the full stop


def test_spans_go_to_their_aligned_words_with_the_sources_spacing():
    texts = [
        "Click <b>here</b> to delete {name}.",  # plain: Click here to delete .
        "Click <b>here</b> to delete {name}.",
        "Tom &amp; Jerry",  # plain: Tom Jerry
        "Update category '%s'",  # plain: Update category '' (the span inside the word '')
        "<b><i>Jesus</i></b> wept.",
    ]
    translations = ["Hier klicken zum Löschen .", "Klicken Sie hier zum Löschen .", "Tom Jerry", "Kategorie '' ändern"]
    translations.append("Jesus weinte.")
    pharaohs = ["1-0 0-1 2-2 3-3 4-4", "0-0 0-1 1-2 2-3 3-4 4-5", "0-0 1-1", "1-0 2-1 0-2", "0-0 1-1"]
    assert plain(texts) == ["Click here to delete .", "Click here to delete .", "Tom Jerry", "Update category ''"] + [
        "Jesus wept."
    ]
    assert restored(texts, translations, pharaohs) == [
        "<b>Hier</b> klicken zum Löschen {name}.",
        "Klicken Sie <b>hier</b> zum Löschen {name}.",  # "Click" -> two words: "here" stays one
        "Tom &amp; Jerry",
        "Kategorie ''%s ändern",
        "<b><i>Jesus</i></b> weinte.",
    ]


def test_a_reordering_keeps_the_tags_in_source_order_and_an_unaligned_word_sends_its_spans_to_the_end():
    texts = ["<b>red</b> and <i>blue</i>", "Hello <b>dear</b> world %d", "<br/>", "{0} {1}", "Jesus wept."]
    translations = ["blau und rot", "Hallo Welt", "", "", "Jesus  weinte."]
    pharaohs = ["2-0 1-1 0-2", "0-0 2-1", "", "", "0-0 1-1"]
    assert restored(texts, translations, pharaohs) == [
        "blau und <b>rot</b> <i></i>",  # blue's tags cannot come before red's: after them, balanced
        "Hallo Welt <b></b> %d",  # "dear" has no translation: its tags at the end, then the placeholder
        "<br/>",  # nothing to translate: the spans alone
        "{0} {1}",
        "Jesus  weinte.",  # no spans: the translation as it is
    ]
    assert restored([], [], []) == []


def test_no_span_is_ever_lost_repeated_reordered_or_altered():
    """Random texts of words and spans (alone, glued before or after a word, tags around one),
    random translations and alignments (any source word to any target word, some to none): each
    output holds its source's spans, in order, unchanged. (Glued spans are those that no word
    beside them can lengthen: a URL, an e-mail address or `$HOME` glued to a word takes it in.)"""
    rng = random.Random(0)
    glued = [span for span in SPANS if not span.startswith(("https", "www", "bob", "$H"))]
    texts, translations, pharaohs = [], [], []
    for _ in range(60):
        parts = []
        for _ in range(rng.randint(0, 8)):
            word = rng.choice(["Jesus", "wept", ",", "AT", "T", "'", "und"])
            word = f"<i>{word}</i>" if rng.random() < 0.3 else word
            word = word + rng.choice(glued) if rng.random() < 0.3 else word
            word = rng.choice(glued) + word if rng.random() < 0.2 else word
            parts.append(rng.choice(SPANS) if rng.random() < 0.2 else word)
        texts.append(" ".join(parts))
        source_words = len(plain([texts[-1]])[0].split())
        target_words = rng.randint(0, 8)
        translations.append(" ".join(rng.choice(["Gott", "sprach", "."]) for _ in range(target_words)))
        pairs = [(rng.randrange(source_words), j) for j in range(target_words) if source_words and rng.random() < 0.8]
        pharaohs.append(" ".join(f"{i}-{j}" for i, j in pairs))
    outputs = restored(texts, translations, pharaohs)
    assert span_lists(outputs) == span_lists(texts)
    assert sum(map(len, span_lists(texts))) > 100 and [] in span_lists(texts)


@pytest.fixture(scope="module")
def translator(untrained_model_dir):
    model, tokenizer, _ = load_model(untrained_model_dir, "latest")
    return kt.Translator(model, tokenizer)


TEXTS = ["Click <b>here</b> to see {name}.", "And God said,", "", "<br/>", "AT&amp;T: %1$d files in $HOME"]


def test_the_translator_protects_spans_and_translates_plain_text_as_usual(translator):
    outputs = translator.translate(TEXTS, markup=True)
    assert span_lists(outputs) == span_lists(TEXTS)
    assert outputs[1:3] == translator.translate(TEXTS[1:3])
    assert translator.translate(TEXTS[0], markup=True) == outputs[0]
    with pytest.raises(ValueError, match="markup=True translates with alignments: drop prefixes"):
        translator.translate(TEXTS, prefixes="Da", markup=True)


def test_the_signature_equals_the_python_path(translator):
    module = TranslationModule(translator.model, translator.tokenizer)
    out = module.translate_markup(tf.constant(TEXTS))
    assert [text.decode("utf-8") for text in out["translation"].numpy()] == translator.translate(TEXTS, markup=True)
    assert out["score"].shape == (len(TEXTS),) and out["score"].numpy()[2] == 0.0


def test_the_command_line_protects_spans_unless_markup_is_off(untrained_model_dir, translator, capsys):
    assert main(["translate", "--model-dir", untrained_model_dir, TEXTS[0], TEXTS[4]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translator.translate([TEXTS[0], TEXTS[4]], markup=True)
    assert span_lists(lines) == span_lists([TEXTS[0], TEXTS[4]])
    assert main(["translate", "--model-dir", untrained_model_dir, "--markup", "off", TEXTS[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translator.translate([TEXTS[0]]) and span_lists(lines) != span_lists([TEXTS[0]])
