"""Documents, not sentences (issue 36 item 1): the sentence rule of `translation/sentences.py`,
eager and in a graph, a too long sentence cut at its best boundary, and `Translator.translate`,
the CLI and the SavedModel signature that translate a paragraph whole."""

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.translation.sentences import join, split

# (text, its sentences, the separator after each)
CASES = [
    (
        "Mr. Smith went to Washington. He arrived at 3.14 p.m. on Monday!",
        ["Mr. Smith went to Washington.", "He arrived at 3.14 p.m. on Monday!"],
        [" ", ""],
    ),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."], [" ", ""]),
    ("Really?! Yes... I think so.", ["Really?!", "Yes...", "I think so."], [" ", " ", ""]),
    ("Wait… what happened? e.g. this one. And that.", ["Wait… what happened? e.g. this one.", "And that."], [" ", ""]),
    (
        "J. S. Bach wrote it. Dr. Who? (Yes.) Done.",
        ["J. S. Bach wrote it.", "Dr. Who?", "(Yes.)", "Done."],
        [" "] * 3 + [""],
    ),
    ("你好。我很好！谢谢？", ["你好。", "我很好！", "谢谢？"], ["", "", ""]),
    ("No trailing punctuation here", ["No trailing punctuation here"], [""]),
    ("  Leading and trailing.  \n", ["", "Leading and trailing."], ["  ", "  \n"]),
    ("One.  Two.\n\nThree.", ["One.", "Two.", "Three."], ["  ", "\n\n", ""]),
    ("Line one\nLine two", ["Line one", "Line two"], ["\n", ""]),
    ("Hello   world.\u3000Next", ["Hello   world.", "Next"], ["\u3000", ""]),
    ("", [], []),
    ("   ", [""], ["   "]),
]
TEXTS = [text for text, _, _ in CASES]


def decoded(ragged) -> list[list[str]]:
    return [[piece.decode("utf-8") for piece in row] for row in ragged.to_list()]


def test_the_rule_splits_tricky_texts_and_keeps_every_character():
    sentences, separators = split(TEXTS)
    assert decoded(sentences) == [want for _, want, _ in CASES]
    assert decoded(separators) == [want for _, _, want in CASES]
    # sentence 0 + separator 0 + sentence 1 + ... is the text
    assert [t.decode("utf-8") for t in join(sentences, separators).numpy()] == TEXTS


def test_the_graph_splits_as_python_does():
    graph = tf.function(lambda texts: [x.flat_values for x in split(texts)] + [split(texts)[0].row_lengths()])
    texts = TEXTS + ["🦜 Mr. X!  \t Who?\n", "a" * 500 + ". " + "b" * 3]
    eager = split(texts)
    flat_sentences, flat_separators, rows = graph(tf.constant(texts))
    assert flat_sentences.numpy().tolist() == eager[0].flat_values.numpy().tolist()
    assert flat_separators.numpy().tolist() == eager[1].flat_values.numpy().tolist()
    assert rows.numpy().tolist() == eager[0].row_lengths().numpy().tolist()


LONG = (
    "And God said, Let there be light: and there was light; and God saw the light, that it was good, "
    "and God divided the light from the darkness, and God called the light Day, and the darkness he called Night"
)


def test_a_sentence_too_long_is_cut_at_clause_boundaries_into_pieces_that_fit(tokenizer):
    max_length = 16  # 15 tokens kept; pieces of at most 14
    count = lambda texts: tokenizer.source_ids(texts, 1000)[1].numpy().tolist()
    assert count([LONG])[0] > 3 * max_length
    document = f"Jesus wept. {LONG}.  Amen."
    sentences, separators = split([document], tokenizer, max_length)
    pieces, after = decoded(sentences)[0], decoded(separators)[0]
    assert pieces[0] == "Jesus wept." and pieces[-1] == "Amen." and after[-2:] == ["  ", ""]
    assert "".join(p + s for p, s in zip(pieces, after)) == document  # every character kept
    assert max(count(pieces)) <= max_length - 2 and len(pieces) >= 5
    cut = pieces[1:-1]
    assert sum(piece[-1] in ",;:" for piece in cut[:-1]) >= len(cut) // 2  # mostly at clause ends
    same, _ = split([document], tokenizer, 1000)  # a sentence that fits stays whole
    assert decoded(same)[0] == ["Jesus wept.", f"{LONG}.", "Amen."]


def test_a_cut_never_falls_inside_a_word_when_a_space_is_near(tokenizer):
    words = " ".join(["beginning"] * 40)  # no clause punctuation: cut at spaces
    sentences, separators = split([words], tokenizer, 12)
    assert all(set(piece.split()) == {"beginning"} for piece in decoded(sentences)[0])
    assert set(decoded(separators)[0][:-1]) == {" "}


def test_sentences_that_fit_are_returned_without_the_cutting_ops(tokenizer, monkeypatch):
    """Eagerly, a split whose sentences all fit skips the cutting, ~80% of a split's time (issue 36)."""
    from keras_transformer.translation import sentences

    ran = []
    cuts = sentences._cuts
    monkeypatch.setattr(sentences, "_cuts", lambda *args: ran.append(1) or cuts(*args))
    document = f"Jesus wept. {LONG}.  Amen."
    fitting, _ = split([document], tokenizer, 1000)
    assert decoded(fitting)[0] == ["Jesus wept.", f"{LONG}.", "Amen."] and ran == []
    cut, _ = split([document], tokenizer, 16)
    assert len(decoded(cut)[0]) >= 5 and ran == [1]


@pytest.fixture(scope="module")
def document_model(untrained_model_dir):
    """conftest's untrained model dir (max_length 24) and its `Translator`."""
    return untrained_model_dir, kt.Translator.from_model_dir(untrained_model_dir)


SENTENCES = ["In the beginning God created the heaven and the earth.", "Jesus wept.", "And God said,"]


def test_a_paragraph_longer_than_max_length_comes_out_whole(document_model, capsys):
    _, translator = document_model
    paragraph = f"{SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]} {LONG}."
    assert translator.tokenizer.source_ids([paragraph], 1000)[1].numpy()[0] > 3 * 24
    translator.translate(paragraph)
    assert "truncated" in capsys.readouterr().err  # one sequence: cut at max_length
    document = translator.translate(paragraph, split=True)
    assert "truncated" not in capsys.readouterr().err
    one, two, _ = translator.translate(SENTENCES)
    assert document.startswith(f"{one} {two}\n\n")  # each sentence translated, in order, whitespace kept
    sentences, separators = split([paragraph], translator.tokenizer, 24)
    pieces = decoded(sentences)[0]
    assert pieces[:2] == SENTENCES[:2] and len(pieces) >= 6
    want = "".join(t + s for t, s in zip(translator.translate(pieces), decoded(separators)[0]))
    assert document == want and "truncated" not in capsys.readouterr().err
    assert translator.translate([paragraph, "", "Jesus wept."], split=True) == [document, "", two]


def test_a_document_takes_no_prefix(document_model):
    with pytest.raises(ValueError, match="a document \\(split=True\\) takes no prefixes or constraints"):
        document_model[1].translate("Jesus wept.", prefixes="Jesus", split=True)


@pytest.mark.slow
def test_the_signature_translates_documents_as_python_does(document_model):
    _, translator = document_model
    module = TranslationModule(translator.model, translator.tokenizer, decoding=translator.decoding)
    documents = [f"{SENTENCES[0]}  {SENTENCES[1]}\n{LONG}", "", "Jesus wept.", "  Amen.  "]
    out = module.translate_document(tf.constant(documents))["translation"].numpy()
    assert [t.decode("utf-8") for t in out] == translator.translate(documents, split=True)
    assert "translate_document" in module.signatures() and "serving_default" in module.signatures()


@pytest.mark.slow
def test_the_cli_splits_each_line_unless_told_not_to(document_model, capsys):
    path, translator = document_model
    paragraph = f"{SENTENCES[1]} {SENTENCES[0]}"
    assert main(["translate", "--model-dir", path, paragraph]) == 0
    assert capsys.readouterr().out == translator.translate(paragraph, split=True) + "\n"
    assert main(["translate", "--model-dir", path, "--no-split", paragraph]) == 0
    assert capsys.readouterr().out == translator.translate(paragraph) + "\n"
