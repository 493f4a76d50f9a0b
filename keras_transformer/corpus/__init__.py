"""Corpus-scale work (the README's "Corpus scale on Apache Beam"): translating files of lines with
an export, back-translating monolingual text with a reverse model, and cleaning sentence pairs.

`cleaning` and `noise` are pure Python (`train --clean` uses them without Beam); the other
modules build Apache Beam pipelines and import `apache_beam` (the `beam` extra): nothing here is
imported by `import keras_transformer`, so other commands never pay for Beam.
"""
