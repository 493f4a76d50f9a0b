"""Files translated with their structure kept (keras_transformer/files/, issue 51): per format a
fixture built here; with an identity translator the output equals the input but for the targets;
with the tiny trained model the invariants (placeholders and inline codes exactly, cues and timecodes,
`msgfmt --check`); TMX as training data equal to the TSV of its pairs; a malformed file of each format
gives one line naming it and leaves no output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile

import pytest
from lxml import etree

from keras_transformer.files import FileFormatError, file_format, translate_file
from tests.conftest import FIXTURE, TINY_TRAINING, run_cli, trained, translating  # noqa: F401


class Identity:
    """A translator whose translation is its input (markup path included)."""

    def __init__(self):
        self.calls = []

    def translate(self, texts, markup=False, split=False, target_lang=None):
        self.calls.append(list(texts))
        return list(texts)


class Marked(Identity):
    """Every word wrapped as "[word]" outside tags: a translation that differs from its source and keeps its tags."""

    def translate(self, texts, markup=False, split=False, target_lang=None):
        self.calls.append(list(texts))
        return [re.sub(r"(?<![<\w/])([A-Za-z]+)(?![\w>/])", r"[\1]", text) for text in texts]


@pytest.fixture(scope="module")
def model(translating):  # noqa: F811
    """A model that writes words (the 30-step `trained` one stops at once, and an empty translation
    keeps its source: `units.translate_texts`), greedy."""
    import keras_transformer as kt

    return kt.Translator.from_model_dir(translating.model_dir, beam_size=1)


# ---------------------------------------------------------------- PO

PO = r"""# A comment
msgid ""
msgstr ""
"Language: de\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: src/app.py:10
#, python-format
msgctxt "menu"
msgid "Delete %(name)s now"
msgstr ""

#: src/app.py:12
#, c-format
msgid "%d file was saved in %s"
msgid_plural "%d files were saved in %s"
msgstr[0] ""
msgstr[1] ""

msgid "Open {0} in the window\n"
msgstr ""

msgid "Already translated"
msgstr "Schon übersetzt"
"""


def _po(tmp_path):
    path = tmp_path / "messages.po"
    path.write_text(PO, encoding="utf-8")
    return path


def test_po_identity_fills_only_the_targets_and_flags_them_fuzzy(tmp_path):
    import polib

    out = tmp_path / "out.po"
    translate_file(Identity(), str(_po(tmp_path)), str(out))
    before, after = polib.pofile(str(_po(tmp_path))), polib.pofile(str(out))
    assert after.metadata == before.metadata and after.header == before.header
    assert len(after) == len(before)
    for old, new in zip(before, after):
        fields = lambda entry: (entry.msgid, entry.msgctxt, entry.occurrences, entry.comment)
        assert fields(new) == fields(old)
        if old.msgstr == "Schon übersetzt":
            assert new.msgstr == old.msgstr and new.flags == old.flags  # kept, not flagged
            continue
        assert new.flags == [*old.flags, "fuzzy"]
        if old.msgid_plural:
            assert new.msgstr_plural == {0: old.msgid, 1: old.msgid_plural}
        else:
            assert new.msgstr == old.msgid
    # the input is untouched; the output is the input but for the filled msgstrs and fuzzy flags
    assert _po(tmp_path).read_text(encoding="utf-8") == PO
    kept = out.read_text(encoding="utf-8").replace('"Schon übersetzt"', "X")  # polib keeps the header's standard order
    unfilled = re.sub(r'msgstr(\[\d\])? ".+"', r'msgstr\1 ""', kept).replace("#, fuzzy\n", "").replace(", fuzzy", "")
    assert unfilled == PO.replace('"Schon übersetzt"', "X")


def test_po_overwrite_translated(tmp_path):
    import polib

    out = tmp_path / "out.po"
    translate_file(Marked(), str(_po(tmp_path)), str(out), overwrite_translated=True)
    entry = polib.pofile(str(out)).find("Already translated")
    assert entry.msgstr == "[Already] [translated]" and "fuzzy" in entry.flags


def test_po_with_the_model_keeps_placeholders_and_passes_msgfmt(tmp_path, model):
    import polib

    out = tmp_path / "out.po"
    translate_file(model, str(_po(tmp_path)), str(out))
    count = lambda text: sorted(re.findall(r"%\(\w+\)s|%[sd]|\{\d\}", text))
    for entry in polib.pofile(str(out)):
        if entry.msgid_plural:
            assert count(entry.msgstr_plural[0]) == count(entry.msgid)
            assert count(entry.msgstr_plural[1]) == count(entry.msgid_plural)
        elif entry.msgid:
            assert count(entry.msgstr) == count(entry.msgid)
            assert entry.msgstr.endswith("\n") == entry.msgid.endswith("\n")
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        if os.environ.get("CI") == "true":
            pytest.fail("msgfmt is missing on CI: .ci/run installs Debian's gettext")
        pytest.skip("msgfmt (Debian's gettext) is not installed: apt-get install gettext")
    result = subprocess.run(
        [msgfmt, "--check", "--use-fuzzy", "-o", os.devnull, str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_po_with_a_glossary_holds_the_terms_in_units_with_and_without_placeholders(tmp_path, translating):  # noqa: F811
    """The glossary reaches every unit, one with a placeholder (the markup path) included: each
    translation holds "Gabe", a word the model does not write for these sentences without it."""
    import polib

    import keras_transformer as kt

    source = tmp_path / "in.po"
    source.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "Close the window"\nmsgstr ""\n\nmsgid "Open {0} in the window"\nmsgstr ""\n',
        encoding="utf-8",
    )
    terms = kt.Glossary((("window", "Gabe"),))
    for name, glossary in (("plain.po", None), ("glossary.po", terms)):
        translator = kt.Translator.from_model_dir(translating.model_dir, beam_size=2, glossary=glossary)
        translate_file(translator, str(source), str(tmp_path / name))
    translations = lambda name: [entry.msgstr for entry in polib.pofile(str(tmp_path / name)) if entry.msgid]
    assert len(translations("glossary.po")) == 2
    assert not any("Gabe" in text for text in translations("plain.po"))
    assert all("Gabe" in text for text in translations("glossary.po"))
    assert "{0}" in translations("glossary.po")[1]


# ---------------------------------------------------------------- XLIFF

XLIFF12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="app">
    <body>
      <trans-unit id="1">
        <source>Click <g id="1">here</g> to save <x id="2"/> the file</source>
        <note>A note</note>
      </trans-unit>
      <trans-unit id="2">
        <source>Press <bpt id="3">&lt;b&gt;</bpt>Enter<ept id="3">&lt;/b&gt;</ept> now, %s</source>
        <target/>
      </trans-unit>
      <trans-unit id="3" translate="no">
        <source>Keep me</source>
      </trans-unit>
    </body>
  </file>
</xliff>
"""

XLIFF20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1">
      <segment>
        <source>Open <pc id="1">the file</pc> and <ph id="2"/> save it</source>
      </segment>
    </unit>
    <unit id="u2">
      <segment state="initial">
        <source>Close <sc id="3"/>the window<ec startRef="3"/></source>
      </segment>
    </unit>
  </file>
</xliff>
"""


def _without(path, tag: str) -> bytes:
    """The document with every element named `tag` removed (its tail too, as lxml removes it)."""
    tree = etree.parse(str(path))
    for element in list(tree.iter(f"{{*}}{tag}", tag)):
        element.getparent().remove(element)
    for segment in tree.iter("{*}segment"):  # XLIFF 2.0's state: the segment's
        segment.attrib.pop("state", None)
    return etree.tostring(tree)


def _codes(element) -> list[tuple[str, str | None]]:
    codes = (e for e in element.iter() if e is not element)
    return sorted((etree.QName(e).localname, e.get("id") or e.get("startRef")) for e in codes)


@pytest.mark.parametrize("document", [XLIFF12, XLIFF20], ids=["1.2", "2.0"])
def test_xliff_identity_adds_only_targets(tmp_path, document):
    path, out = tmp_path / "in.xlf", tmp_path / "out.xlf"
    path.write_text(document, encoding="utf-8")
    translate_file(Identity(), str(path), str(out))
    assert _without(out, "target") == _without(path, "target")
    tree = etree.parse(str(out))
    for source in tree.iter("{*}source"):
        target = source.getnext()
        if source.getparent().get("translate") == "no":
            assert target is None or etree.QName(target).localname != "target"
            continue
        assert etree.QName(target).localname == "target"
        assert (
            etree.tostring(target).split(b">", 1)[1].rsplit(b"<", 1)[0]
            == etree.tostring(source).split(b">", 1)[1].rsplit(b"<", 1)[0]
        )
        if "1.2" in document:
            assert target.get("state") == "needs-review-translation"
        else:
            assert source.getparent().get("state") == "translated"


@pytest.mark.parametrize("document", [XLIFF12, XLIFF20], ids=["1.2", "2.0"])
def test_xliff_with_the_model_carries_inline_codes_once(tmp_path, document, model):
    path, out = tmp_path / "in.xlf", tmp_path / "out.xlf"
    path.write_text(document, encoding="utf-8")
    translate_file(model, str(path), str(out))
    tree = etree.parse(str(out))  # valid XML
    targets = list(tree.iter("{*}target"))
    assert len(targets) == 2
    for target in targets:
        source = target.getprevious()
        assert _codes(target) == _codes(source)
        assert ("%s" in "".join(target.itertext())) == ("%s" in "".join(source.itertext()))


def test_xliff_without_target_language_needs_one(tmp_path):
    path = tmp_path / "in.xlf"
    path.write_text(XLIFF20.replace(' trgLang="de"', ""), encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"in.xlf:2: <xliff> has no trgLang: pass --target-lang"):
        translate_file(Identity(), str(path), str(tmp_path / "out.xlf"))
    translate_file(Identity(), str(path), str(tmp_path / "out.xlf"), target_lang="fr")
    assert etree.parse(str(tmp_path / "out.xlf")).getroot().get("trgLang") == "fr"


# ---------------------------------------------------------------- TMX

TMX = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4">
  <header srclang="en" datatype="plaintext" segtype="sentence" adminlang="en" creationtool="t"
   creationtoolversion="1" o-tmf="x"/>
  <body>
    <tu tuid="1">
      <tuv xml:lang="en"><seg>Save the <bpt i="1">&lt;b&gt;</bpt>file<ept i="1">&lt;/b&gt;</ept></seg></tuv>
      <tuv xml:lang="de"><seg>Die <bpt i="1">&lt;b&gt;</bpt>Datei<ept i="1">&lt;/b&gt;</ept> speichern</seg></tuv>
    </tu>
    <tu tuid="2">
      <tuv xml:lang="en"><seg>Open the window</seg></tuv>
    </tu>
    <tu tuid="3">
      <tuv xml:lang="en-US"><seg>Close   it</seg></tuv>
      <tuv xml:lang="de-DE"><seg>Schließ es</seg></tuv>
    </tu>
  </body>
</tmx>
"""


def test_tmx_fills_missing_target_variants_only(tmp_path):
    path, out = tmp_path / "memory.tmx", tmp_path / "out.tmx"
    path.write_text(TMX, encoding="utf-8")
    translate_file(Identity(), str(path), str(out))
    tree = etree.parse(str(out))
    added = [tu for tu in tree.iter("tu") if len(tu.findall("tuv")) == 2]
    assert len(added) == 3
    second = tree.find(".//tu[@tuid='2']")
    assert [tuv.get("{http://www.w3.org/XML/1998/namespace}lang") for tuv in second] == ["en", "de"]
    assert second[1].findtext("seg") == "Open the window"
    # removing the added variant gives the input back
    for tuv in list(second)[1:]:
        second.remove(tuv)
    assert etree.tostring(tree) == etree.tostring(etree.parse(str(path)))


def test_tmx_training_data_equals_the_tsv_of_its_pairs(tmp_path):
    from keras_transformer.data.sources import read_pairs

    path = tmp_path / "memory.tmx"
    path.write_text(TMX, encoding="utf-8")
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("Save the file\tDie Datei speichern\nClose it\tSchließ es\n", encoding="utf-8")
    assert read_pairs(str(path), "all") == read_pairs(str(tsv), "all")
    assert read_pairs(str(path), "all", reverse=True) == read_pairs(str(tsv), "all", reverse=True)
    named = tmp_path / "memory.de-en.tmx"  # the name's pair wins: German to English
    named.write_text(TMX, encoding="utf-8")
    assert read_pairs(str(named), "all") == read_pairs(str(tsv), "all", reverse=True)


def test_tmx_training_data_malformed_names_the_line(tmp_path):
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.sources import read_pairs

    path = tmp_path / "memory.tmx"
    path.write_text(TMX.replace('</tu>\n    <tu tuid="2">', '<tu tuid="2">', 1), encoding="utf-8")
    with pytest.raises(DataError, match=r"memory.tmx:\d+: not well-formed TMX"):
        read_pairs(str(path), "all")


# ---------------------------------------------------------------- SRT and WebVTT

SRT = """1
00:00:01,000 --> 00:00:04,000
In the beginning God created
the heavens and the earth.

2
00:00:05,500 --> 00:00:07,250 X1:10 X2:20 Y1:30 Y2:40
Jesus wept.

7
00:01:00,000 --> 00:01:02,000
And God said, Let there be light,
and there was light, and it was good,
and God saw the light.

"""

VTT = """WEBVTT

NOTE a comment that stays

intro
00:00:01.000 --> 00:00:04.000 align:start position:10%
In the beginning God created
the heavens and the earth.

00:00:05.000 --> 00:00:06.000
<v Bob>Jesus wept.</v>
"""


def test_srt_identity_and_rewrap(tmp_path):
    import srt

    path, out = tmp_path / "in.srt", tmp_path / "out.srt"
    path.write_text(SRT, encoding="utf-8")
    identity = Identity()
    translate_file(identity, str(path), str(out))
    assert out.read_text(encoding="utf-8").split("\n\n")[1:2] == SRT.split("\n\n")[1:2]
    # a cue's lines go to the translator as one text
    assert "In the beginning God created the heavens and the earth." in identity.calls[0]
    translate_file(Marked(), str(path), str(out))
    before, after = list(srt.parse(SRT)), list(srt.parse(out.read_text(encoding="utf-8")))
    assert [(c.index, c.start, c.end, c.proprietary) for c in after] == [
        (c.index, c.start, c.end, c.proprietary) for c in before
    ]
    assert [c.content.count("\n") for c in after] == [c.content.count("\n") for c in before]
    words = "[In] [the] [beginning] [God] [created] [the] [heavens] [and] [the] [earth]."
    assert after[0].content.replace("\n", " ") == words


def test_vtt_keeps_cues_settings_and_notes(tmp_path, model):
    import webvtt

    path, out = tmp_path / "in.vtt", tmp_path / "out.vtt"
    path.write_text(VTT, encoding="utf-8")
    translate_file(Identity(), str(path), str(out))
    assert out.read_text(encoding="utf-8").strip() == VTT.strip()
    translate_file(model, str(path), str(out))
    text = out.read_text(encoding="utf-8")
    assert "NOTE a comment that stays" in text and "align:start position:10%" in text
    before, after = webvtt.read(str(path)), webvtt.read(str(out))
    assert [(c.identifier, c.start, c.end) for c in after] == [(c.identifier, c.start, c.end) for c in before]
    assert len(after[0].lines) <= 2 and after[1].raw_text.count("<v Bob>") == 1 and "</v>" in after[1].raw_text


# ---------------------------------------------------------------- HTML

HTML = """<!DOCTYPE html>
<html><head><title>The light</title><style>p { color: red; }</style></head>
<body>
<h1>In the beginning</h1>
<p>God said, <b>Let there be</b> light, and <a href="https://example.org/x" title="Genesis">there was</a> light.</p>
<p translate="no">Do not translate me</p>
<pre>Jesus wept.</pre>
<p>Run <code>make demo</code> now. <img src="a.png" alt="A lamp"></p>
<ul><li>Jesus wept. <ul><li>Amen.</li></ul></li></ul>
<script>var light = "Let there be light";</script>
</body></html>
"""


def test_html_identity_is_the_same_page(tmp_path):
    path, out = tmp_path / "in.html", tmp_path / "out.html"
    for page in (HTML, HTML.split("\n", 1)[1]):  # with and without a doctype
        path.write_text(page, encoding="utf-8")
        translate_file(Identity(), str(path), str(out))
        assert out.read_text(encoding="utf-8") == page


def test_html_translates_text_and_attributes_only(tmp_path):
    path, out = tmp_path / "in.html", tmp_path / "out.html"
    path.write_text(HTML, encoding="utf-8")
    translate_file(Marked(), str(path), str(out))
    page = out.read_text(encoding="utf-8")
    for kept in ("<p translate=\"no\">Do not translate me</p>", "<pre>Jesus wept.</pre>", "<code>make demo</code>",
                 'var light = "Let there be light";', "p { color: red; }", 'href="https://example.org/x"'):  # fmt: skip
        assert kept in page
    expected = ("<b>[Let] [there] [be]</b>", 'title="[Genesis]"', 'alt="[A] [lamp]"', "<title>[The] [light]",
                  "<li>[Jesus] [wept]. <ul><li>[Amen].</li></ul></li>")  # fmt: skip
    for translated in expected:
        assert translated in page
    tags = lambda text: re.findall(r"<[^>]+>", re.sub(r'(title|alt)="[^"]*"', "", text))
    assert tags(page) == tags(HTML)


# ---------------------------------------------------------------- Markdown

MARKDOWN = """---
title: Light
---
# In the beginning

God said, *Let there be* light,
and there was `light()` and [a link](https://example.org/a_b "t").

```python
print("Let there be light")
```

<div>Jesus wept.</div>

- Jesus wept.
> And God saw the light.
"""


def test_markdown_keeps_code_links_html_and_front_matter(tmp_path):
    path, out = tmp_path / "in.md", tmp_path / "out.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    translate_file(Identity(), str(path), str(out))
    assert out.read_text(encoding="utf-8") == MARKDOWN
    translate_file(Marked(), str(path), str(out))
    text = out.read_text(encoding="utf-8")
    for kept in ("---\ntitle: Light\n---\n", '```python\nprint("Let there be light")\n```', "<div>Jesus wept.</div>",
                 "`light()`", '](https://example.org/a_b "t")'):  # fmt: skip
        assert kept in text
    for translated in ("# [In] [the] [beginning]", "*[Let] [there] [be]*", "- [Jesus] [wept].", "> [And] [God]"):
        assert translated in text
    assert text.count("\n") == MARKDOWN.count("\n")


# ---------------------------------------------------------------- DOCX and txt


def _docx(path):
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("In the beginning ")
    paragraph.add_run("God").bold = True
    paragraph.add_run(" created the ")
    paragraph.add_run("heavens").italic = True
    paragraph.add_run(" and the earth.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Jesus wept."
    table.cell(0, 1).text = "Amen."
    document.save(str(path))


def _runs(path):
    import docx

    document = docx.Document(str(path))
    cells = [cell.paragraphs for row in document.tables[0].rows for cell in row.cells]
    paragraphs = [*document.paragraphs, *(p for ps in cells for p in ps)]
    return [[(run.text, run.bold, run.italic) for run in paragraph.runs] for paragraph in paragraphs]


def test_docx_keeps_paragraphs_tables_runs_and_formatting(tmp_path):
    path, out = tmp_path / "in.docx", tmp_path / "out.docx"
    _docx(path)
    translate_file(Identity(), str(path), str(out))
    assert _runs(out) == _runs(path)
    translate_file(Marked(), str(path), str(out))
    runs = _runs(out)
    assert [[(bold, italic) for _, bold, italic in paragraph] for paragraph in runs] == [
        [(bold, italic) for _, bold, italic in paragraph] for paragraph in _runs(path)
    ]
    assert runs[0][1] == ("[God]", True, None) and runs[0][3] == ("[heavens]", None, True)
    assert runs[1][0][0] == "[Jesus] [wept]."


def test_txt_keeps_paragraphs_and_line_counts(tmp_path):
    path, out = tmp_path / "in.txt", tmp_path / "out.txt"
    text = "In the beginning God created\nthe heavens and the earth.\n\n  Jesus wept.\n"
    path.write_text(text, encoding="utf-8")
    translate_file(Identity(), str(path), str(out))
    assert out.read_text(encoding="utf-8") == text
    translate_file(Marked(), str(path), str(out))
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == len(text.split("\n")) and lines[3] == "  [Jesus] [wept]."


# ---------------------------------------------------------------- errors and the CLI

MALFORMED = {
    "po": ('msgid "a"\nmsgstr "b"\nbroken\n', r"bad.po:3: not a PO file"),
    "xlf": (XLIFF12.replace("</trans-unit>", "", 1), r"bad.xlf:\d+: not well-formed XML"),
    "tmx": (TMX.replace("</seg>", "", 1), r"bad.tmx:7: not well-formed XML"),
    "srt": ("1\n00:00:01,000 --> 00:00:02,000\nhi\n\n2\n00:00:03,000 -> 00:00:04\nho\n", r"bad.srt:5: not an SRT cue"),
    "vtt": ("NOT VTT\n\n00:01.000 --> 00:02.000\nhi\n", r"bad.vtt: not WebVTT"),
    "html": (b"<p>caf\xe9</p>\n", r"bad.html:1: not UTF-8 text"),
    "md": (b"# one\n\ncaf\xe9\n", r"bad.md:3: not UTF-8 text"),
    "docx": (b"PK not a zip", r"bad.docx: not a DOCX document"),
    "txt": (b"ok\n\xff\n", r"bad.txt:2: not UTF-8 text"),
}


@pytest.mark.parametrize("extension", MALFORMED)
def test_malformed_file_one_line_and_no_output(tmp_path, extension):
    content, message = MALFORMED[extension]
    path = tmp_path / f"bad.{extension}"
    (path.write_bytes if isinstance(content, bytes) else lambda c: path.write_text(c, encoding="utf-8"))(content)
    out = tmp_path / "out" / f"out.{extension}"
    out.parent.mkdir()
    with pytest.raises(FileFormatError, match=message) as raised:
        translate_file(Identity(), str(path), str(out))
    assert "\n" not in str(raised.value)
    assert os.listdir(out.parent) == []  # no output, no temporary file
    assert path.read_bytes() == (content if isinstance(content, bytes) else content.encode("utf-8"))


def test_unknown_extension_lists_the_formats():
    with pytest.raises(ValueError, match=r"a.odt: unknown extension; the formats: po \(.po .pot\), xliff"):
        file_format("a.odt")
    assert file_format("a.odt", "txt") == "txt" and file_format("A.XLF") == "xliff"


@pytest.mark.slow
def test_translate_file_command(tmp_path, trained):  # noqa: F811
    po = _po(tmp_path)
    srt_path = tmp_path / "in.srt"
    srt_path.write_text(SRT, encoding="utf-8")
    result = run_cli("translate-file", str(po), str(srt_path), "--model-dir", trained.model_dir, "--out-dir",
                     str(tmp_path / "out"), "--beam-size", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["in.srt", "messages.po"]
    bad = tmp_path / "bad.srt"
    bad.write_text(MALFORMED["srt"][0], encoding="utf-8")
    result = run_cli("translate-file", str(bad), "--model-dir", trained.model_dir, "--out", str(tmp_path / "o.srt"))
    assert result.returncode == 2
    assert re.fullmatch(r"keras-transformer: error: .*bad.srt:5: not an SRT cue.*\n", result.stderr)
    assert not (tmp_path / "o.srt").exists()
    result = run_cli("translate-file", "a.odt", "--model-dir", trained.model_dir)
    assert result.returncode == 2 and "the formats: po" in result.stderr


def test_the_translator_is_called_once_per_chunk_with_markup():
    """Batching across units: one call for all the file's distinct lines (up to `units.CHUNK`); a
    `Translator` (it has a tokenizer) takes documents, an export's translator one sentence with
    markup; a bilingual model is not told the file's target language, a multilingual one is."""
    from keras_transformer.files import units

    class Recording:
        def __init__(self, tokenizer=None):
            self.tokenizer, self.calls = tokenizer, []

        def translate(self, texts, **options):
            self.calls.append((list(texts), options))
            return list(texts)

    export = Recording()
    texts = [f"Line {i} of text" for i in range(units.CHUNK + 5)] + ["Line 0 of text", "42", ""]
    assert units.translate_texts(units.translator_function(export, "de"), texts) == texts
    assert [len(call) for call, _ in export.calls] == [units.CHUNK, 5]  # distinct lines, numbers skipped
    assert export.calls[0][1] == {"markup": True}
    bilingual = Recording(tokenizer=type("Tokenizer", (), {"lang_ids": {}})())
    units.translator_function(bilingual, "de")(["Jesus wept."])
    assert bilingual.calls[0][1] == {"markup": True, "split": True}
    assert units.translate_texts(lambda texts: [""] * len(texts), ["Jesus wept.", " Amen.\n"]) == [
        "Jesus wept.",
        " Amen.\n",
    ]  # an empty translation keeps the source
    multilingual = Recording(tokenizer=type("Tokenizer", (), {"lang_ids": {"de": 7}})())
    units.translator_function(multilingual, "de")(["Jesus wept."])
    assert multilingual.calls[0][1] == {"markup": True, "split": True, "target_lang": "de"}


@pytest.mark.slow
def test_translate_file_with_an_export(tmp_path, trained):  # noqa: F811
    from keras_transformer.exporters.tensorflow import export_tensorflow
    from keras_transformer.model_dir import load_model

    model, tokenizer, _ = load_model(trained.model_dir)
    export_tensorflow(model, tokenizer, str(tmp_path / "export"), log=lambda message: None, tflite=False)
    path, out = tmp_path / "in.xlf", tmp_path / "out.xlf"
    path.write_text(XLIFF12, encoding="utf-8")
    result = run_cli("translate-file", str(path), "--export", str(tmp_path / "export"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    for target in etree.parse(str(out)).iter("{*}target"):
        assert _codes(target) == _codes(target.getprevious())


def test_tmx_training_languages_given_or_found(tmp_path):
    """`--source-lang`/`--target-lang` (DataConfig.source_lang, target_lang) choose the pair; without
    them a TMX of three languages is refused in one line."""
    from keras_transformer.config import DataConfig
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.sources import read_pairs

    path = tmp_path / "memory.tmx"
    path.write_text(TMX.replace('<tuv xml:lang="en"><seg>Open the window', '<tuv xml:lang="fr"><seg>Ouvre'), "utf-8")
    assert read_pairs(str(path), "all", tmx_langs=("de", "en")) == (
        ["Die Datei speichern", "Schließ es"],
        ["Save the file", "Close it"],
    )
    with pytest.raises(DataError, match=r"memory.tmx: cannot tell its language pair .* pass --source-lang"):
        read_pairs(str(path), "all")
    with pytest.raises(ValueError, match="target_lang must be a language code"):
        DataConfig(data=str(path), target_lang="d e")


@pytest.mark.slow
def test_train_on_a_tmx_learns_what_the_tsv_of_its_pairs_teaches(tmp_path):
    """`train --data memory.tmx` and `train --data pairs.tsv` of the same pairs: the same vocabulary
    and the same weights after the same steps (one data path, TMX read into it)."""
    from xml.sax.saxutils import escape

    pairs = [line.split("\t") for line in FIXTURE.read_text(encoding="utf-8").splitlines()[:200]]
    units = "".join(
        f'<tu><tuv xml:lang="en"><seg>{escape(a)}</seg></tuv><tuv xml:lang="de"><seg>{escape(b)}</seg></tuv></tu>\n'
        for a, b in pairs
    )
    (tmp_path / "memory.tmx").write_text(
        f'<?xml version="1.0"?>\n<tmx version="1.4"><header srclang="en"/><body>\n{units}</body></tmx>\n', "utf-8"
    )
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    models = {}
    for name in ("memory.tmx", "pairs.tsv"):
        model_dir = tmp_path / f"model-{name}"
        flags = ["--max-steps", "2", "--steps-per-epoch", "2", "--bleu-every-epochs", "0", *TINY_TRAINING]
        result = run_cli("train", "--data", str(tmp_path / name), "--model-dir", str(model_dir), *flags)
        assert result.returncode == 0, result.stderr
        models[name] = model_dir
    tokenizers = [(models[name] / "tokenizer.model").read_bytes() for name in models]
    assert tokenizers[0] == tokenizers[1]
    import keras_transformer as kt

    translations = [kt.Translator.from_model_dir(str(models[name])).translate(["Jesus wept."]) for name in models]
    assert translations[0] == translations[1]
