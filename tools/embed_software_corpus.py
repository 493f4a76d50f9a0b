"""Write the embedded `software-en-de` corpus: keras_transformer/resources/software.en-de.{train,validation,test}.tsv.gz
from a `source<TAB>target` file (the shared `pypi_permissive.en-de.tsv.gz`), split by
`keras_transformer.data.splits.software_split`, in the file's order, reproducibly (gzip mtime 0).

    python tools/embed_software_corpus.py /work/shared/data/pypi_permissive.en-de.tsv.gz
"""

from __future__ import annotations

import argparse
import gzip
import os

from keras_transformer.data.splits import SPLITS, software_split

RESOURCES = os.path.join(os.path.dirname(__file__), "..", "keras_transformer", "resources")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="the source<TAB>target file (.gz)")
    args = parser.parse_args()
    lines = {split: [] for split in SPLITS}
    with gzip.open(args.source, "rt", encoding="utf-8") as f:
        for line in f:
            source, _target = line.rstrip("\n").split("\t")
            lines[software_split(source)].append(line if line.endswith("\n") else line + "\n")
    for split, kept in lines.items():
        path = os.path.join(RESOURCES, f"software.en-de.{split}.tsv.gz")
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write("".join(kept).encode("utf-8"))
        print(f"{path}: {len(kept)} pairs")


if __name__ == "__main__":
    main()
