"""`SavedModelTranslator`: an export's signatures behind `Translator`'s text methods give the
Python translator's outputs, and a directory without one SavedModel is refused in one line."""

import pytest

from keras_transformer.translation.exported import SavedModelTranslator, saved_model_path
from keras_transformer.translation.translator import Translator

TEXTS = ["In the beginning God created the heavens and the earth.", "Jesus wept.", "", "Amen. Jesus wept."]


@pytest.fixture(scope="module")
def export_and_python(cli_export, translating):
    """conftest's `cli_export` (`keras-transformer export` of `translating`, no TFLite), and the model
    dir's `Translator` with the export's settings (`disable_unk`: `export_decoding`)."""
    return cli_export.out, Translator.from_model_dir(translating.model_dir, disable_unk=True)


def test_the_exports_translations_equal_the_python_translators(export_and_python):
    out, python = export_and_python
    exported = SavedModelTranslator(out)
    assert exported.translate(TEXTS) == python.translate(TEXTS)
    assert exported.translate("Jesus wept.") == python.translate("Jesus wept.")
    marked = ["Click <b>here</b>, {name}.", "Jesus 🦜 wept."]
    assert exported.translate(marked, markup=True) == python.translate(marked, markup=True)
    assert exported.translate(TEXTS, split=True) == python.translate(TEXTS, split=True)
    texts_of = lambda rows: [[text for text, _ in row] for row in rows]
    assert texts_of(exported.translate_nbest(TEXTS[:2], n=2)) == texts_of(python.translate_nbest(TEXTS[:2], 2))
    want = python.score(TEXTS[:2], ["Am Anfang", "Jesus"])
    got = exported.score(TEXTS[:2], ["Am Anfang", "Jesus"])
    assert [tokens for _, _, tokens in got] == [score.tokens for score in want]
    assert [s for s, _, _ in got] == pytest.approx([score.score for score in want], abs=1e-4)


def test_the_int8_saved_model_is_found_and_translates(export_and_python):
    out, python = export_and_python
    exported = SavedModelTranslator(out, int8=True)
    assert exported.path.endswith("translator_int8/1")
    assert len(exported.translate(TEXTS)) == len(TEXTS) and exported.translate([""]) == [""]


def test_a_directory_without_one_text_saved_model_is_refused_in_one_line(tmp_path, export_and_python):
    with pytest.raises(ValueError, match=r"expected one text SavedModel .* found 0$"):
        saved_model_path(str(tmp_path))
    out, _ = export_and_python
    with pytest.raises(ValueError, match="has no signature 'translate_to'"):
        SavedModelTranslator(out).translate(["Jesus wept."], target_lang="fr")
