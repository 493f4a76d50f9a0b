"""Glossaries: terminology as lexical constraints.

A glossary is a list of (source term, target term) pairs, read from a TSV file (one pair a line,
tab-separated). Where a source sentence holds a term (whole words; case-insensitive unless asked
otherwise), its target term becomes one of the sentence's constraint phrases, so every
translation holds it (`search/constraints.py`: dynamic beam allocation, Post & Vilar, 2018). An empty
target term means "do not translate": the source term itself, as the glossary spells it, is the
constraint (brand and product names).

Matching is one rule for every path: a RE2 regular expression per term, run by
`tf.strings.regex_full_match`, eagerly for `Translator` and in the graph of the SavedModel that
`export --glossary FILE` writes (`exporters/signatures.py`), so the two find the same terms. A
term is whole words when the characters beside it are not letters, digits or "_" (Unicode
classes, so "Grüße" is one word). Every matching term is a constraint, overlapping ones too
("Save" and "Save as" in "Save as..." give both phrases).

    glossary = kt.Glossary.from_tsv("terms.tsv")
    translator = kt.Translator.from_model_dir("runs/demo", glossary=glossary)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tensorflow as tf

_NOT_WORD = r"[^\pL\pN_]"  # a character that is not part of a word (RE2 Unicode classes)


@dataclass(frozen=True)
class Glossary:
    """(source term, target term) pairs; an empty target keeps the source term untranslated."""

    terms: tuple[tuple[str, str], ...]
    case_sensitive: bool = False

    def __post_init__(self):
        if not self.terms:
            raise ValueError("a glossary needs at least one term")
        for source, target in self.terms:
            if not source.strip():
                raise ValueError(f"a glossary term must be non-empty text, got {source!r} -> {target!r}")
            if r"\E" in source:
                raise ValueError(f"a glossary term may not hold '\\E': {source!r}")

    @classmethod
    def from_tsv(cls, path: str, case_sensitive: bool = False) -> Glossary:
        """The glossary of a TSV file: `source<TAB>target` a line (`source<TAB>` for a term to keep
        as it is); blank lines are skipped. A ValueError names the line of a malformed one."""
        terms = []
        try:
            with open(path, encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    line = line.rstrip("\r\n")
                    if not line.strip():
                        continue
                    fields = line.split("\t")
                    if len(fields) != 2 or not fields[0].strip():
                        raise ValueError(
                            f"glossary {path}:{number}: expected 'source term<TAB>target term' "
                            f"('source term<TAB>' keeps it untranslated), got {line!r}"
                        )
                    terms.append((fields[0].strip(), fields[1].strip()))
        except FileNotFoundError:
            raise ValueError(f"glossary {path}: no such file") from None
        except UnicodeDecodeError as error:
            raise ValueError(f"glossary {path}: not UTF-8 text ({error})") from None
        if not terms:
            raise ValueError(f"glossary {path}: no terms")
        return cls(tuple(terms), case_sensitive)

    def check(self, tokenizer, max_length: int) -> None:
        """A ValueError for a phrase that the constraint search cannot hold: characters the
        vocabulary lacks, or more than max_length - 1 tokens (`constraints.phrase_rows`)."""
        from keras_transformer.search.constraints import phrase_rows

        try:
            phrase_rows(tokenizer, [self.phrases], 1, max_length)
        except ValueError as error:
            raise ValueError(f"the glossary's {error}") from None

    def save(self, path: str) -> None:
        """Write the terms as a TSV file that `from_tsv` reads back."""
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{source}\t{target}\n" for source, target in self.terms)

    @property
    def phrases(self) -> list[str]:
        """Each term's constraint phrase: its target term, or the source term where that is empty."""
        return [target or source for source, target in self.terms]

    def patterns(self) -> list[str]:
        """Each term's RE2 pattern, matching a whole text that holds the term as whole words."""
        flags = "(?s)" if self.case_sensitive else "(?is)"
        return [rf"{flags}(?:.*{_NOT_WORD})?\Q{source}\E(?:{_NOT_WORD}.*)?" for source, _ in self.terms]

    def matches(self, text):
        """text [B] strings -> [B, G] bool: which of the G terms each text holds (graph or eager)."""
        text = tf.convert_to_tensor(text, tf.string)
        return tf.stack([tf.strings.regex_full_match(text, pattern) for pattern in self.patterns()], axis=1)

    def constraint_phrases(self, text):
        """text [B] strings -> [B, C] strings: each text's matching terms' phrases, padded with ""
        (no phrase; C >= 1), for `translate_constrained`."""
        matched = self.matches(text)  # [B, G]
        phrases = tf.broadcast_to(tf.constant(self.phrases), tf.shape(matched))  # [B, G]
        rows = tf.ragged.boolean_mask(phrases, matched).to_tensor(default_value="")  # [B, C]
        return tf.pad(rows, [[0, 0], [0, 1]])  # one "" column: never [B, 0]

    def with_terms(self, texts: Sequence[str], constraints: list[list[str]] | None) -> list[list[str]] | None:
        """Each text's constraint phrases (`constraints`, one list per text, or None) followed by
        the phrases of the terms it holds; None when there are none at all."""
        if not texts:
            return constraints
        matched = self.matches(list(texts)).numpy()  # [B, G]
        rows = [list(row) for row in constraints] if constraints is not None else [[] for _ in texts]
        for row, hits in zip(rows, matched):
            row.extend(phrase for phrase, hit in zip(self.phrases, hits) if hit and phrase not in row)
        return rows if any(rows) else None
