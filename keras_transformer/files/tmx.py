"""TMX translation memories: the missing target variants filled, read and written by lxml.

Each `<tu>` with a source variant (the header's `srclang`) and no variant in the target language
(`--target-lang`, else the one other language of the file) gets a `<tuv xml:lang="...">` after its
source variant, its `<seg>` translated from the source's with the inline codes (`<bpt>`, `<ept>`, `<ph>`,
`<it>`, `<ut>` whole, `<hi>` around its words) carried by `inline.py`; with `--overwrite-translated`
an existing target variant is translated anew. The rest of the file is unchanged. (As training data,
`train --data memory.tmx` reads it: `data/tmx.py`.)
"""

from __future__ import annotations

from lxml import etree

from keras_transformer.files import FileFormatError, inline, xmlfile

PAIRED = {"hi", "sub"}


def _languages(path: str, root, target: str | None) -> tuple[str, str]:
    header = root.find("header")
    source = (header.get("srclang") if header is not None else "") or ""
    if source in ("", "*all*"):
        raise FileFormatError(f"{xmlfile.where(path, header if header is not None else root)} names no srclang")
    if target is None:
        base = lambda code: code.lower().split("-")[0]
        found = {base(tuv.get(xmlfile.XML_LANG) or "") for tuv in root.iter("tuv")} - {base(source), ""}
        if len(found) != 1:
            raise FileFormatError(f"{path}: languages {sorted(found) or 'none'} beside {source}: pass --target-lang")
        target = found.pop()
    return source.lower(), target


def _variant(tu, lang: str):
    """The <tuv> of `lang` (or of its base language, "de" for "de-DE") in `tu`, or None."""
    for tuv in tu.iterfind("tuv"):
        code = (tuv.get(xmlfile.XML_LANG) or "").lower()
        if code == lang.lower() or code.split("-")[0] == lang.lower().split("-")[0]:
            return tuv
    return None


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import translate_texts

    tree = xmlfile.parse(path, "TMX")
    root = tree.getroot()
    if root.tag != "tmx":
        raise FileFormatError(f"{xmlfile.where(path, root)} is not a TMX root (<tmx>)")
    source_lang, target_lang = _languages(path, root, options.target_lang)
    paired = lambda child: etree.QName(child).localname in PAIRED
    todo = []
    for tu in root.iter("tu"):
        source = _variant(tu, source_lang)
        if source is None:
            continue
        seg = source.find("seg")
        if seg is None:
            raise FileFormatError(f"{xmlfile.where(path, source)} has no <seg>")
        target = _variant(tu, target_lang)
        if target is not None and not options.overwrite_translated:
            continue
        text, codes = inline.encode(seg, paired, lambda child: not paired(child))
        todo.append((source, target, codes, text))
    for (source, target, codes, _), translation in zip(
        todo, translate_texts(translate, [t[3] for t in todo], options.name, by_line=False)
    ):
        if target is None:  # after the source variant, with its indentation
            target = source.makeelement("tuv", {xmlfile.XML_LANG: target_lang})
            target.text, target.tail = source.text, source.tail
            seg = target.makeelement("seg", {})
            seg.tail = source.find("seg").tail
            target.append(seg)
            source.addnext(target)
        seg = target.find("seg")
        inline.decode(translation, codes, seg)
    xmlfile.write(tree, out)
