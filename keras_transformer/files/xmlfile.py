"""An XML document (XLIFF, TMX) read and written by lxml as it is: declaration, comments and
whitespace kept; a malformed one a `FileFormatError` with its line."""

from __future__ import annotations

from lxml import etree

from keras_transformer.files import FileFormatError

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def parse(path: str, what: str):
    """The lxml tree of `path` (`what`: the format's name, for the error)."""
    parser = etree.XMLParser(remove_blank_text=False, resolve_entities=False, no_network=True, huge_tree=True)
    try:
        return etree.parse(path, parser)
    except etree.XMLSyntaxError as error:
        raise FileFormatError(f"{path}:{error.lineno}: not well-formed XML, so not {what} ({error.msg})") from None


def where(path: str, element) -> str:
    """ "path:line: <tag id=...>": an element named for an error."""
    name = etree.QName(element).localname
    ident = element.get("id") or element.get("tuid")
    return f"{path}:{element.sourceline}: <{name}{f' id={ident!r}' if ident else ''}>"


def write(tree, out: str) -> None:
    """The tree to `out`, with the input's XML declaration (encoding, standalone) if it had one."""
    info = tree.docinfo
    declared = bool(info.xml_version)
    data = etree.tostring(tree, xml_declaration=declared, encoding=info.encoding or "UTF-8", standalone=info.standalone)
    with open(out, "wb") as f:
        f.write(data)
        if not data.endswith(b"\n"):
            f.write(b"\n")
