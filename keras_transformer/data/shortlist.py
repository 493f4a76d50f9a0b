"""A vocabulary shortlist learned from the training pairs: for each source token, the target tokens
most associated with it, and the most frequent target tokens (CTranslate2's `vmap`, Marian's
lexical shortlist; the candidate lists of Jean et al., 2015, "On Using Very Large Target
Vocabulary for Neural Machine Translation"). A search restricts its output layer to the union of
a batch's shortlists (`search/shortlist.py`).

Built in one streaming pass over the pairs, tokenized with the model's tokenizer (sources as the
encoder reads them, targets as the decoder writes them), with NumPy counts of:

- c(s, t): the pairs whose source holds token s and whose target holds token t;
- c(s), c(t): the pairs whose source holds s, whose target holds t;
- n(t): every occurrence of t in the targets (the frequent tokens' order).

Each source token keeps the `per_source` targets of highest Dice coefficient
2 c(s, t) / (c(s) + c(t)) (ties: the larger c(s, t), then the lower id), an association that,
unlike c(s, t) or c(t | s) alone, does not hand every source token the same frequent targets,
which the `frequent` list holds already (Dice's coefficient as an association of words in
parallel text: Och & Ney, 2003, "A Systematic Comparison of Various Statistical Alignment
Models", its heuristic baseline).

Stored as an .npz file (a model dir's `shortlist.npz`, `model_dir.shortlist`): `table` [V, per_source]
int32 (row s: source token s's targets, best first, padded with PAD_ID, which every shortlist holds),
`frequent` [N] int32 (most frequent first), `pairs` (the pairs counted).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

import numpy as np

from keras_transformer.special_tokens import PAD_ID

PER_SOURCE = 50  # Marian's examples use 50 or 100 translations per source word
FREQUENT = 100  # and the 100 most frequent target words (`--shortlist lex.s2t 100 100`)
MERGE_EVERY = 1 << 22  # (s, t) codes gathered before they are merged into the running counts


@dataclasses.dataclass(frozen=True, eq=False)
class Shortlist:
    """`table` [V, k] int32: each source token's targets, PAD_ID-padded; `frequent` [N] int32: the
    most frequent targets. NumPy arrays, or tensors and variables (an exported module's). Hashed
    by identity: a traced search is keyed by the shortlist it reads."""

    table: object
    frequent: object
    pairs: int = 0  # the pairs it was counted from (0: not said)

    @property
    def vocab_size(self) -> int:
        return int(self.table.shape[0])

    def save(self, path: str) -> None:
        """Write `path` (an .npz file; its directory is made)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        temporary = path + ".tmp.npz"
        table, frequent = np.asarray(self.table, np.int32), np.asarray(self.frequent, np.int32)
        np.savez(temporary, table=table, frequent=frequent, pairs=np.int64(self.pairs))
        os.replace(temporary, path)  # atomic: never a half-written shortlist

    @classmethod
    def load(cls, path: str, vocab_size: int | None = None) -> Shortlist:
        """The shortlist of the .npz file `path`, checked against the model's `vocab_size`."""
        with np.load(path) as arrays:
            shortlist = cls(arrays["table"].astype(np.int32), arrays["frequent"].astype(np.int32), int(arrays["pairs"]))
        if vocab_size is not None and shortlist.vocab_size != vocab_size:
            raise ValueError(
                f"{path} is for a vocabulary of {shortlist.vocab_size} tokens, the model has {vocab_size}: "
                "build it again"
            )
        return shortlist


class Counts:
    """The counts of the module docstring, over a vocabulary of `vocab_size`, added to pair by pair
    (`add`), merged into sorted (code, count) arrays every `MERGE_EVERY` codes (code = s * V + t)."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.source = np.zeros(vocab_size, np.int64)  # c(s)
        self.target = np.zeros(vocab_size, np.int64)  # c(t)
        self.occurrences = np.zeros(vocab_size, np.int64)  # n(t)
        self.codes = np.zeros(0, np.int64)  # merged (s, t) codes, ascending
        self.counts = np.zeros(0, np.int64)  # c(s, t) of each
        self.pending: list[np.ndarray] = []
        self.pending_size = 0
        self.pairs = 0

    def add(self, source_ids: list[np.ndarray], target_ids: list[np.ndarray]) -> None:
        """Count a batch of pairs: each source's and target's token ids (any order, repeats)."""
        v = self.vocab_size
        self.pairs += len(source_ids)
        self.occurrences += np.bincount(np.concatenate([*target_ids, np.zeros(0, np.int64)]), minlength=v)
        source_pair, source = _sets(source_ids, v)  # each pair's distinct tokens, by pair
        target_pair, target = _sets(target_ids, v)
        self.source += np.bincount(source, minlength=v)
        self.target += np.bincount(target, minlength=v)
        # Every (s, t) of a pair: each of its source tokens repeated once per target token it has.
        per_pair = np.bincount(target_pair, minlength=len(source_ids))  # [pairs]: its distinct targets
        first = np.cumsum(per_pair) - per_pair  # [pairs]: where its targets start in `target`
        repeats = per_pair[source_pair]  # [source tokens]
        left = np.repeat(source, repeats)  # [codes]
        offsets = np.arange(len(left)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
        right = target[np.repeat(first[source_pair], repeats) + offsets]  # [codes]
        self.pending.append(left * v + right)
        self.pending_size += len(left)
        if self.pending_size >= MERGE_EVERY:
            self._merge()

    def _merge(self) -> None:
        if not self.pending:
            return
        codes, counts = np.unique(np.concatenate(self.pending), return_counts=True)
        merged, inverse = np.unique(np.concatenate([self.codes, codes]), return_inverse=True)
        self.counts = np.bincount(inverse, weights=np.concatenate([self.counts, counts]), minlength=len(merged))
        self.counts = self.counts.astype(np.int64)
        self.codes, self.pending, self.pending_size = merged, [], 0

    def shortlist(self, per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
        """The `per_source` targets of highest Dice coefficient of every source token, and the
        `frequent` most frequent targets (see the module docstring)."""
        self._merge()
        v = self.vocab_size
        source, target = self.codes // v, self.codes % v
        dice = 2.0 * self.counts / (self.source[source] + self.target[target])
        order = np.lexsort((target, -self.counts, -dice, source))  # by source, then best first
        source, target = source[order], target[order]
        rank = np.arange(len(source)) - np.searchsorted(source, source)  # rank within its source token
        kept = rank < per_source
        table = np.full((v, per_source), PAD_ID, np.int32)
        table[source[kept], rank[kept]] = target[kept]
        seen = np.flatnonzero(self.occurrences)
        by_count = seen[np.lexsort((seen, -self.occurrences[seen]))]  # most frequent first, ties: lower id
        return Shortlist(table, by_count[:frequent].astype(np.int32), self.pairs)


def _sets(rows: list[np.ndarray], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(pair index, token id) of each pair's distinct tokens, ordered by pair."""
    lengths = np.array([len(row) for row in rows], np.int64)
    pair = np.repeat(np.arange(len(rows)), lengths)
    ids = np.concatenate([*rows, np.zeros(0, np.int64)]).astype(np.int64)
    unique = np.unique(pair * vocab_size + ids)
    return unique // vocab_size, unique % vocab_size


def count_pairs(batches: Iterable[tuple[list[np.ndarray], list[np.ndarray]]], vocab_size: int) -> Counts:
    """The counts of every batch of (source ids, target ids) rows."""
    counts = Counts(vocab_size)
    for source_ids, target_ids in batches:
        counts.add(source_ids, target_ids)
    return counts


TOKENIZED_PER_BATCH = 4096  # pairs tokenized at once


def tokenized_pairs(tokenizer, pairs) -> Iterable[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Batches of (source ids, target ids) of a `tf.data` stream of (source, target) strings, by
    `tokenizer` as the model reads sources and writes targets (no EOS: every output has one)."""
    from keras_transformer.data.errors import data_errors

    with data_errors():
        for sources, targets in pairs.batch(TOKENIZED_PER_BATCH).prefetch(1):
            source_ids = tokenizer.tokenize_source(sources)  # [B, (n)]
            target_ids = tokenizer.tokenize(targets)  # [B, (m)]
            yield _rows(source_ids), _rows(target_ids)


def _rows(ragged) -> list[np.ndarray]:
    values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
    return np.split(values.astype(np.int64), splits[1:-1])
