"""WebVTT subtitles, read and written by webvtt-py.

The same cues with the same identifiers, timecodes and cue settings, the header, NOTE comments and
STYLE blocks as they were; a cue's lines (with their `<v>`, `<b>`, `<c>` tags, kept by the markup
path) are translated together and rewrapped to the cue's number of lines (`units.rewrap`).
"""

from __future__ import annotations

import webvtt

from keras_transformer.files import FileFormatError, read_text


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import rewrap, translate_texts

    text = read_text(path)
    try:
        captions = webvtt.from_string(text)
    except (webvtt.errors.MalformedFileError, webvtt.errors.MalformedCaptionError) as error:
        raise FileFormatError(f"{path}: not WebVTT ({error})") from None
    cues = list(captions)
    joined = [" ".join(line.strip() for line in cue.lines) for cue in cues]
    for cue, translation in zip(cues, translate_texts(translate, joined, options.name)):
        cue.text = rewrap(translation, cue.lines)
    with open(out, "w", encoding="utf-8") as f:
        f.write(captions.content)
