"""SubRip (SRT) subtitles, read and written by the `srt` library.

The same cues, in the same order, with the same indices, timecodes and any text after the timecodes
(the library's `proprietary` field: positions); a cue's lines are translated together, as one text,
and rewrapped to the cue's number of lines (`units.rewrap`).
"""

from __future__ import annotations

import srt

from keras_transformer.files import FileFormatError, read_text


def parse(path: str, text: str) -> list:
    try:
        return list(srt.parse(text, ignore_errors=False))
    except srt.SRTParseError as error:
        line = text.count("\n", 0, error.expected_start) + 1
        raise FileFormatError(f"{path}:{line}: not an SRT cue (index, start --> end, text)") from None
    except (ValueError, TypeError) as error:
        raise FileFormatError(f"{path}: not SRT ({error})") from None


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import rewrap, translate_texts

    text = read_text(path)
    cues = parse(path, text)
    joined = [" ".join(line.strip() for line in cue.content.split("\n")) for cue in cues]
    for cue, translation in zip(cues, translate_texts(translate, joined, options.name)):
        cue.content = rewrap(translation, cue.content.split("\n"))
    eol = "\r\n" if "\r\n" in text else "\n"
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write(srt.compose(cues, reindex=False, strict=False, eol=eol))
