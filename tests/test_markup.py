"""Markup and placeholders (issue 36 item 2; translation/markup.py, translation/markup_restore.py):
every kind of span found whole, put back by hand-made alignments where the golden outputs say,
never lost, repeated, reordered or altered (a seeded batch of random texts, translations and
alignments), and the Python path, the SavedModel's `translate_markup` and the CLI agree; a model's
span rule also protects the characters its vocabulary cannot write (issue 36 item 5)."""

import random
import string

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.model_dir import load_model
from keras_transformer.translation.markup import plain_text, span_lists, span_rule, vocabulary_characters
from keras_transformer.translation.markup_restore import restore

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


def test_spans_the_model_writes_itself_are_left_out():
    """A translation that holds spans of its own (a model trained on software strings writes `{}`
    and `$num`) gives the source's spans only, once each."""
    texts = ["'%(group)s' reused '%(status)s' already taken", "No enum match for: {$viewValue$}", "{name} left"]
    translations = ["'' Gruppe „{}“ bereits %(status)s vergeben", "Keinenum für {$num}:'", "{0} ging"]
    pharaohs = ["0-1 1-2 2-3", "0-0 1-1 2-2", "0-1"]
    outputs = restored(texts, translations, pharaohs)
    assert span_lists(outputs) == span_lists(texts) == [["%(group)s", "%(status)s"], ["$viewValue"], ["{name}"]]
    assert outputs[2] == "{name} ging"


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
        vocabulary = ["Gott", "sprach", "."] + (["{}", "%s"] if span_lists(texts[-1:])[0] else [])  # the model's own
        translations.append(" ".join(rng.choice(vocabulary) for _ in range(target_words)))
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
    prefixed = translator.translate(TEXTS, prefixes="Da", markup=True)  # one pipeline: markup takes every input
    assert span_lists(prefixed) == span_lists(TEXTS) and prefixed[1].startswith("Da")


def test_the_signature_equals_the_python_path(translator):
    """Unknown characters too: the signature bakes the tokenizer's span rule."""
    module = TranslationModule(translator.model, translator.tokenizer)
    out = module.translate_markup(tf.constant(TEXTS + UNKNOWN_TEXTS))
    outputs = [text.decode("utf-8") for text in out["translation"].numpy()]
    assert outputs == translator.translate(TEXTS + UNKNOWN_TEXTS, markup=True)
    assert [output.count(item) for output, item in zip(outputs[len(TEXTS) :], UNKNOWN)] == [1] * len(UNKNOWN)
    assert out["score"].shape == (len(TEXTS + UNKNOWN_TEXTS),) and out["score"].numpy()[2] == 0.0


@pytest.mark.slow  # the command line's twin of the Translator tests above (issue 50: make test's time)
def test_the_command_line_protects_spans_unless_markup_is_off(untrained_model_dir, translator, capsys):
    assert main(["translate", "--model-dir", untrained_model_dir, TEXTS[0], TEXTS[4]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translator.translate([TEXTS[0], TEXTS[4]], markup=True, split=True)  # lines are documents
    assert span_lists(lines) == span_lists([TEXTS[0], TEXTS[4]])
    assert main(["translate", "--model-dir", untrained_model_dir, "--markup", "off", TEXTS[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translator.translate([TEXTS[0]], split=True) and span_lists(lines) != span_lists([TEXTS[0]])


# Unknown characters (issue 36 item 5): none of these is in the fixture's verses, so none in its
# vocabulary; an emoji ZWJ sequence, one with a skin tone, with a variation selector, a CJK name, a symbol.
UNKNOWN = ["👩\u200d💻", "👍🏽", "❤\ufe0f", "山田太郎", "⚖"]
UNKNOWN_TEXTS = [f"Jesus {item} wept." for item in UNKNOWN[:3]] + [f"And {UNKNOWN[3]} said,", f"{UNKNOWN[4]} Amen."]


def test_a_tokenizers_span_rule_protects_runs_of_what_its_vocabulary_cannot_write(tokenizer):
    """Whole runs, emoji sequences one span; not Latin letters the vocabulary lacks (the model may
    spell them), nor any character of its pieces, nor Unicode spaces (SentencePiece makes them spaces)."""
    known, rule = vocabulary_characters(tokenizer), span_rule(tokenizer)
    assert not known & set("".join(UNKNOWN)) and "\u2581" not in known and "<" not in known  # no "<unk>", "<0x..>"
    assert span_lists(UNKNOWN_TEXTS, rule) == [[item] for item in UNKNOWN]
    assert {"\u2026", "\ufb01"} <= known and span_lists(["Amen\u2026 \ufb01ne"], rule) == [[]]  # NFKC: "...", "fi"
    assert span_lists(UNKNOWN_TEXTS) == [[]] * len(UNKNOWN)  # `SPAN`, the rule without a tokenizer: as before
    latin = [letter for letter in "QXÖØŁæđ" if letter not in known]
    assert len(latin) >= 3 and span_lists([f"{''.join(latin)}ord wept.", "a\u00a0b\u2009c"], rule) == [[], []]
    every = "".join(sorted(known))
    assert span_lists([every, "<b>" + every + "</b> {0}"], rule) == span_lists([every, "<b>" + every + "</b> {0}"])
    # ASCII is left to `SPAN`, even where the vocabulary lacks it: a run never cuts a placeholder.
    absent = [c for c in string.punctuation + string.digits if c not in known]
    assert len(absent) >= 5 and span_lists([f"{c}%s{c}" for c in absent], rule) == [["%s"]] * len(absent)
    assert span_lists([f"⚖{span} ⚖" for span in SPANS], rule) == [["⚖", span, "⚖"] for span in SPANS]
    assert plain_text(tf.constant(["Jesus 🦜山田太郎, wept."]), span=rule).numpy()[0].decode() == "Jesus , wept."


def test_export_checks_sample_holds_a_tag_a_placeholder_and_an_unknown_character(tokenizer):
    """`export --check` compares `translate_markup` with Python on this sample: an export whose
    signature lacks the tokenizer's rule loses the "⚖" and is reported."""
    from keras_transformer.exporters.quality_check import markup_sample

    assert span_lists(markup_sample(["Jesus wept."]), span_rule(tokenizer)) == [["<b>", "</b>", "{0}", "⚖"]]


def test_the_translator_and_the_command_line_keep_every_unknown_character_once(untrained_model_dir, translator, capsys):
    """An untrained model writes none of them (the fixture's vocabulary has no byte fallback: each is
    the unknown id, dropped); with markup, the default of `translate`, each comes back once."""
    outputs = translator.translate(UNKNOWN_TEXTS, markup=True)
    assert [output.count(item) for output, item in zip(outputs, UNKNOWN)] == [1] * len(UNKNOWN)
    assert [item in output for output, item in zip(translator.translate(UNKNOWN_TEXTS), UNKNOWN)] == [False] * 5
    assert main(["translate", "--model-dir", untrained_model_dir, *UNKNOWN_TEXTS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translator.translate(UNKNOWN_TEXTS, markup=True, split=True)
    assert [line.count(item) for line, item in zip(lines, UNKNOWN)] == [1] * len(UNKNOWN)
