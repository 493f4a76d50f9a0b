"""The files of a TSV source: the embedded corpora, paths, globs and comma-separated lists of them,
and which layout they have (plain `source<TAB>target` lines, or the Bible layout's header)."""

from __future__ import annotations

import functools
import glob
import gzip
import os
from importlib import resources

from keras_transformer.config import BIBLE_EN_DE, BIBLE_EN_FR, SOFTWARE_EN_DE
from keras_transformer.data.errors import DataError

BIBLE_HEADER = ("book", "chapter", "verse")
# Embedded Bibles: one file of every verse, split by books (`splits.BIBLE_HELD_OUT_BOOKS`).
BIBLES = {BIBLE_EN_DE: "bible.en-de.tsv.gz", BIBLE_EN_FR: "bible.en-fr.tsv.gz"}
# Embedded corpora that ship one plain TSV file per split (resources/README.md).
SPLIT_FILES = {SOFTWARE_EN_DE: "software.en-de.{split}.tsv.gz"}


def _resource(name: str) -> str:
    return str(resources.files("keras_transformer") / "resources" / name)


def split_files(spec: str, split: str) -> list[str]:
    """The file of one split ("train", "validation", "test") of an embedded corpus of `SPLIT_FILES`."""
    return [_resource(SPLIT_FILES[spec].format(split=split))]


def data_files(spec: str) -> list[str]:
    """The files of a TSV source: an embedded corpus's (all its splits), or every path and glob of a
    comma-separated list, in order."""
    if spec in BIBLES:
        return [_resource(BIBLES[spec])]
    if spec in SPLIT_FILES:
        return [path for split in ("train", "validation", "test") for path in split_files(spec, split)]
    files = []
    for pattern in (part.strip() for part in spec.split(",")):
        if any(c in pattern for c in "*?["):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise DataError(f"no data files match {pattern}")
            files += matches
        elif os.path.isfile(pattern):
            files.append(pattern)
        elif pattern:
            raise DataError(f"no such data file: {pattern}")
    if not files:
        raise DataError(f"no data files in {spec!r}")
    return files


def open_file(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def is_bible_layout(files: list[str]) -> bool:
    """Whether the files start with the Bible layout's `book<TAB>chapter<TAB>verse...` header; all or none must."""
    header = [field.encode() for field in BIBLE_HEADER]
    bible = []
    for path in files:
        try:
            with open_file(path) as f:
                bible.append(f.readline().rstrip(b"\r\n").split(b"\t")[:3] == header)
        except (OSError, EOFError) as error:
            raise DataError(f"{path}: cannot read ({error})") from None
    if any(bible) and not all(bible):
        names = ", ".join(files)
        raise DataError(f"{names}: some files have the Bible layout's book<TAB>chapter<TAB>verse header, some not")
    return all(bible)


def has_own_splits(spec: str) -> bool:
    """Whether a source carries its splits (TFDS, the Bible layout) rather than being one set of pairs."""
    return spec.startswith("tfds:") or spec in SPLIT_FILES or is_bible_layout(data_files(spec))


@functools.lru_cache(maxsize=16)
def count_lines(path: str, mtime: float, size: int) -> int:
    """Lines in a file (a last line without a newline included), counted once per file version."""
    lines, last = 0, b"\n"
    try:
        with open_file(path) as f:
            while chunk := f.read(1 << 22):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None
    return lines + (last != b"\n")
