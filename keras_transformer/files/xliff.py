"""XLIFF 1.2 and 2.0 (OASIS), read and written by lxml.

Every unit gets a `<target>` right after its `<source>` (kept unless `--overwrite-translated` where it
has content): in 1.2 with `state="needs-review-translation"`, in 2.0 its `<segment>` with
`state="translated"` (the 2.0 spec's states: initial, translated, reviewed, final), and the file's
target language (`target-language`, `trgLang`) set where missing. Inline codes are carried into the
target through `inline.py`: 1.2's `<g>`, `<mrk>` around their translated words, `<x/>`, `<bx/>`,
`<ex/>`, `<ph>`, `<bpt>`, `<ept>`, `<it>` whole; 2.0's `<pc>`, `<mrk>` around words, `<ph/>`, `<sc/>`,
`<ec/>`, `<cp/>`, `<sm/>`, `<em/>` whole; each with its id, once. Units marked `translate="no"` are
left alone; the rest of the document is unchanged.
"""

from __future__ import annotations

from lxml import etree

from keras_transformer.files import FileFormatError, inline, xmlfile

NAMESPACES = {"1.2": "urn:oasis:names:tc:xliff:document:1.2", "2.0": "urn:oasis:names:tc:xliff:document:2.0"}
PAIRED = {"1.2": {"g", "mrk"}, "2.0": {"pc", "mrk"}}


def _units(root, version: str):
    """(unit element, the element whose <source>/<target> to fill): 1.2 trans-units, 2.0 segments."""
    ns = {"x": NAMESPACES[version]}
    if version == "1.2":
        return [(unit, unit) for unit in root.iterfind(".//x:trans-unit", ns)]
    return [(unit, segment) for unit in root.iterfind(".//x:unit", ns) for segment in unit.iterfind("x:segment", ns)]


def _version(path: str, root) -> str:
    for version, namespace in NAMESPACES.items():
        if root.tag == f"{{{namespace}}}xliff":
            return version
    raise FileFormatError(f"{xmlfile.where(path, root)} is not an XLIFF 1.2 or 2.0 root (namespace {NAMESPACES})")


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import translate_texts

    tree = xmlfile.parse(path, "XLIFF")
    root = tree.getroot()
    version = _version(path, root)
    namespace = NAMESPACES[version]
    paired = lambda child: etree.QName(child).localname in PAIRED[version]
    todo = []  # (holder, source, codes, text)
    for unit, holder in _units(root, version):
        if unit.get("translate") == "no":
            continue
        source = holder.find(f"{{{namespace}}}source")
        if source is None:
            raise FileFormatError(f"{xmlfile.where(path, holder)} has no <source>")
        target = holder.find(f"{{{namespace}}}target")
        if target is not None and (len(target) or (target.text or "").strip()) and not options.overwrite_translated:
            continue
        text, codes = inline.encode(source, paired, lambda child: not paired(child))
        todo.append((holder, source, codes, text))
    if todo:
        _set_target_language(path, root, version, options.target_lang)
    for (holder, source, codes, _), translation in zip(
        todo, translate_texts(translate, [t[3] for t in todo], options.name, by_line=False)
    ):
        target = holder.find(f"{{{namespace}}}target")
        if target is None:
            target = source.makeelement(f"{{{namespace}}}target", {})
            target.tail = source.tail
            source.addnext(target)
        inline.decode(translation, codes, target)
        if version == "1.2":
            target.set("state", "needs-review-translation")
        else:
            holder.set("state", "translated")
    xmlfile.write(tree, out)


def _set_target_language(path: str, root, version: str, language: str | None) -> None:
    """The target language attribute (1.2: every <file>'s target-language, 2.0: the root's trgLang),
    from `language` where missing; a FileFormatError where it is missing and not given."""
    holders = root.iterfind(f"{{{NAMESPACES['1.2']}}}file") if version == "1.2" else [root]
    name = "target-language" if version == "1.2" else "trgLang"
    for holder in holders:
        if holder.get(name) is None:
            if not language:
                raise FileFormatError(f"{xmlfile.where(path, holder)} has no {name}: pass --target-lang")
            holder.set(name, language)
