"""gettext PO (and POT) files, read and written by polib.

Every untranslated message is filled (`--overwrite-translated`: every message), plural forms too:
`msgstr[0]` from `msgid`, the others from `msgid_plural`, as many as the header's Plural-Forms
`nplurals` (default 2). Each machine translation is flagged `fuzzy` for review; the header,
`msgctxt`, comments, references, the other flags and obsolete entries are as they were. Placeholders
(`%s`, `%1$d`, `%(name)s`, `{0}`, ICU arguments) come out of the markup path exactly as many times as
in the source. polib holds the parsed file; the texts are translated `units.CHUNK` lines per call.
"""

from __future__ import annotations

import re

import polib

from keras_transformer.files import FileFormatError

_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")


def _nplurals(po) -> int:
    match = _NPLURALS.search(po.metadata.get("Plural-Forms", ""))
    return int(match.group(1)) if match else 2


def read(path: str):
    try:
        return polib.pofile(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        message = (
            str(error).replace("po file ", "").replace(f"{path} ", "")
        )  # polib: "Syntax error in po file (line 3)"
        line = re.search(r"\(line (\d+)\)", message)
        where = f"{path}:{line.group(1)}" if line else path
        what = re.sub(r" *[(]line \d+[)]", "", message)
        raise FileFormatError(f"{where}: not a PO file ({what})") from None


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import translate_texts

    po = read(path)
    plurals = _nplurals(po)
    todo = []  # (entry, plural index or None, source text)
    for entry in po:
        if entry.obsolete or not entry.msgid:
            continue
        if entry.msgid_plural:
            done = any(entry.msgstr_plural.values()) if entry.msgstr_plural else False
            if done and not options.overwrite_translated:
                continue
            todo += [(entry, n, entry.msgid if n == 0 else entry.msgid_plural) for n in range(plurals)]
        elif options.overwrite_translated or not entry.msgstr:
            todo.append((entry, None, entry.msgid))
    translations = translate_texts(translate, [text for _, _, text in todo], options.name)
    for (entry, n, _), translation in zip(todo, translations):
        if n is None:
            entry.msgstr = translation
        else:
            entry.msgstr_plural[n] = translation
        if "fuzzy" not in entry.flags:
            entry.flags.append("fuzzy")
    po.save(out)
