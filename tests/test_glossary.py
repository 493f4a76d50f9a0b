"""Glossaries (`translation/glossary.py`): which terms a text holds, one rule eagerly and in the graph;
every translation of a text that holds a term holds its target term, from Python, the command line
and an exported SavedModel; malformed glossaries and terms the search cannot hold are refused."""

import pytest
import tensorflow as tf
from conftest import FIXTURE

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.data.sources import read_pairs
from keras_transformer.translation.glossary import Glossary

TERMS = (("king", "König"), ("father", "Vater"), ("sea", "Meer"), ("brother", "Bruder"), ("Yahweh", ""))
MATCHING = [
    ("The king said it.", ["König"]),
    ("THE KING SAID IT.", ["König"]),  # case-insensitive
    ("The kingdom is near.", []),  # whole words only
    ("Your father's brother.", ["Vater", "Bruder"]),  # an apostrophe ends a word
    ("Yahweh spoke by the sea", ["Meer", "Yahweh"]),  # at the end, and kept untranslated
    ("seaweed and overseas", []),
    ("king-sea", ["König", "Meer"]),
    ("", []),
]


def test_terms_are_found_as_whole_words_case_insensitively():
    glossary = Glossary(TERMS)
    assert glossary.with_terms([text for text, _ in MATCHING], None) == [phrases for _, phrases in MATCHING]
    sensitive = Glossary(TERMS, case_sensitive=True)
    assert sensitive.with_terms(["THE KING", "the king"], None) == [[], ["König"]]


def test_words_are_unicode_words_and_terms_are_literal_text():
    glossary = Glossary((("Gruß", "greeting"), ("C++", "C++"), ("(beta)", "(Beta)"), ("a.b", "x"), ("ü", "u")))
    texts = ["Grüße und Gruß", "Grußwort", "I like C++ a lot", "version (beta) now", "aXb", "a.b", "über ü"]
    expected = [["greeting"], [], ["C++"], ["(Beta)"], [], ["x"], ["u"]]
    assert glossary.with_terms(texts, None) == expected


def test_the_graph_finds_what_python_finds():
    """`constraint_phrases` in a tf.function (the SavedModel's path) against `with_terms` (Translator's)."""
    glossary = Glossary(TERMS)
    texts = [text for text, _ in MATCHING]
    graph = tf.function(glossary.constraint_phrases, input_signature=[tf.TensorSpec([None], tf.string)])
    rows = [[p.decode("utf-8") for p in row if p] for row in graph(tf.constant(texts)).numpy()]
    assert rows == [phrases for _, phrases in MATCHING]
    assert graph(tf.constant(["nothing here"])).shape == (1, 1)  # never [B, 0]


def test_given_constraints_come_first_and_are_not_repeated():
    glossary = Glossary(TERMS)
    assert glossary.with_terms(["the king", "no term"], [["König", "Gott"], ["Gott"]]) == [
        ["König", "Gott"],
        ["Gott"],
    ]
    assert glossary.with_terms(["no term", "none"], None) is None


def test_a_malformed_glossary_file_is_refused_with_its_line(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("king\tKönig\n\nYahweh\t\nSave Speichern\n", encoding="utf-8")
    message = f"glossary {path}:4: expected 'source term<TAB>target term' ('source term<TAB>' keeps it untranslated)"
    with pytest.raises(ValueError, match=rf"^{message}, got 'Save Speichern'$".replace("(", r"\(").replace(")", r"\)")):
        Glossary.from_tsv(str(path))
    path.write_text("king\tKönig\n\nYahweh\t\n", encoding="utf-8")
    assert Glossary.from_tsv(str(path)).terms == (("king", "König"), ("Yahweh", ""))
    with pytest.raises(ValueError, match="no such file$"):
        Glossary.from_tsv(str(tmp_path / "missing.tsv"))
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=": no terms$"):
        Glossary.from_tsv(str(path))
    path.write_bytes(b"k\xe4nig\tK\n")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        Glossary.from_tsv(str(path))


@pytest.fixture(scope="module")
def held_out(trained):
    sources, _ = read_pairs(str(FIXTURE), "test")
    return kt.Translator.from_model_dir(trained.model_dir), sources


def test_every_translation_holds_the_target_terms_of_its_text(held_out, trained):
    plain, sources = held_out
    glossary = Glossary(TERMS)
    wanted = glossary.with_terms(sources, None)
    assert sum(map(bool, wanted)) == 4  # 4 of the 8 held-out verses hold a term (5 terms)
    translator = kt.Translator.from_model_dir(trained.model_dir, glossary=glossary)
    translations = translator.translate(sources)
    assert all(phrase in text for text, phrases in zip(translations, wanted) for phrase in phrases)
    unconstrained = plain.translate(sources)
    assert sum(all(p in text for p in phrases) for text, phrases in zip(unconstrained, wanted) if phrases) < 4
    assert [t for t, w in zip(translations, wanted) if not w] == [t for t, w in zip(unconstrained, wanted) if not w]
    best = [hypotheses[0][0] for hypotheses in translator.translate_nbest(sources, n=2, constraints=["Gott"])]
    assert all(p in text for text, phrases in zip(best, wanted) for p in ["Gott", *phrases])


def test_terms_the_search_cannot_hold_are_refused_at_once(held_out):
    plain, _ = held_out
    long_term = " ".join(["Gott"] * plain.model.config.max_length)
    with pytest.raises(ValueError, match="^the glossary's constraint phrase 'Gott Gott .* more than max_length - 1"):
        kt.Translator(plain.model, plain.tokenizer, glossary=Glossary((("God", long_term),)))
    with pytest.raises(ValueError, match="^a glossary constrains beam search, not sampling"):
        kt.Translator(plain.model, plain.tokenizer, glossary=Glossary(TERMS), sampling_topk=0)


@pytest.mark.slow  # the command line's twin of the Translator tests above (issue 50: make test's time)
def test_the_command_line_translates_with_a_glossary(held_out, trained, tmp_path, capsys):
    plain, sources = held_out
    path = tmp_path / "terms.tsv"
    Glossary(TERMS).save(str(path))
    assert main(["translate", "--model-dir", trained.model_dir, "--glossary", str(path), *sources]) == 0
    expected = kt.Translator(plain.model, plain.tokenizer, glossary=Glossary(TERMS)).translate(sources)
    assert capsys.readouterr().out.splitlines() == expected


def test_the_command_lines_glossary_errors_are_one_line(trained, tmp_path, capsys):
    path = tmp_path / "terms.tsv"
    path.write_text("king König\n", encoding="utf-8")
    assert main(["translate", "--model-dir", trained.model_dir, "--glossary", str(path), "x"]) == 2
    assert capsys.readouterr().err == (
        f"keras-transformer: error: glossary {path}:1: expected 'source term<TAB>target term' "
        "('source term<TAB>' keeps it untranslated), got 'king König'\n"
    )
    assert main(["translate", "--model-dir", trained.model_dir, "--glossary-case-sensitive", "x"]) == 2
    assert capsys.readouterr().err == "keras-transformer: error: --glossary-case-sensitive needs --glossary FILE\n"


@pytest.mark.slow
def test_an_exported_glossary_is_held_by_the_saved_models_translate_and_checked(held_out, trained, tmp_path):
    """`export --glossary` bakes the terms into the text SavedModels' translate (float and int8);
    `export --check` compares them with the checkpoint's translations under the same glossary."""
    plain, sources = held_out
    path = tmp_path / "terms.tsv"
    Glossary(TERMS).save(str(path))
    out = tmp_path / "export"
    flags = ["--model-dir", trained.model_dir, "--glossary", str(path), "--no-tflite"]
    assert main(["export", *flags, "--out", str(out)]) == 0
    assert Glossary.from_tsv(str(out / "glossary.tsv")) == Glossary(TERMS)
    served = tf.saved_model.load(str(out / "saved_model" / "translator" / "1")).signatures["serving_default"]
    translations = [t.decode("utf-8") for t in served(text=tf.constant(sources))["translation"].numpy()]
    exported = kt.Translator.from_model_dir(trained.model_dir, glossary=Glossary(TERMS), disable_unk=True)
    assert translations == exported.translate(sources)
    int8 = tf.saved_model.load(str(out / "saved_model" / "translator_int8" / "1")).signatures["serving_default"]
    int8_translations = [t.decode("utf-8") for t in int8(text=tf.constant(sources))["translation"].numpy()]
    wanted = Glossary(TERMS).with_terms(sources, None)
    assert all(p in text for text, phrases in zip(int8_translations, wanted) for p in phrases)
    assert main(["export", "--check", str(out), "--sample", "8"]) == 0
