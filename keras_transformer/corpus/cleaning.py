"""Cleaning crawled sentence pairs: the filters of OpenNMT-py's `clean` transform and of Moses'
`clean-corpus-n.perl` (length ratio, too long, copies, wrong script, duplicates), in pure Python.

One implementation for the three places that use it: `keras-transformer clean` (a file, streamed),
`train --clean` (`data.mixing.training_pairs`, every pass over the training split) and a Beam
pipeline's stage (`corpus.stages.CleanPairs`, which runs `pair_fault` per pair and the duplicates
as a grouping). Each pair is judged by the filters in the order of `FILTERS`; the first that
fails it names why it is dropped, so the counts add up to the pairs dropped.

- empty: a side with nothing but whitespace.
- too_long: a side of more than `max_characters` characters.
- length_ratio: (longer + 10) / (shorter + 10) characters above `max_length_ratio` (the 10
  keeps a short pair from being judged by a few characters: "Amen." / "Amen, so sei es." passes).
- copy: the source equals the target, case and surrounding space aside (an untranslated copy).
- wrong_script: less than `min_script_share` of a side's letters are in that side's script
  (`scripts`; by default the script of most letters of that side over the first
  `SCRIPT_SAMPLE` pairs). A letter's script is the first word of its Unicode name ("LATIN
  SMALL LETTER A" -> LATIN, "CYRILLIC ...", "CJK UNIFIED IDEOGRAPH-4E00" -> CJK), a stand-in for
  the Unicode Script property that needs no library beyond `unicodedata`.
- duplicate: the same (source, target) as an earlier pair, exactly.
- near_duplicate: the same as an earlier pair after `normalised` (casefolded, without
  punctuation, symbols, digits and whitespace): "Jesus wept." / "JESUS WEPT 2" are one.

Duplicates keep the first pair seen: memory is one 8-byte hash per distinct pair.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import unicodedata
from collections.abc import Iterable, Iterator

FILTERS = ("empty", "too_long", "length_ratio", "copy", "wrong_script", "duplicate", "near_duplicate")
SCRIPT_SAMPLE = 1000  # pairs whose letters decide each side's script when `scripts` is not given
_RATIO_SMOOTHING = 10  # characters added to both sides' lengths before their ratio


@dataclasses.dataclass(frozen=True)
class CleaningConfig:
    """The filters' thresholds (see the module docstring)."""

    max_length_ratio: float = 3.0  # (longer + 10) / (shorter + 10), in characters
    max_characters: int = 1000  # per side
    min_script_share: float = 0.5  # of a side's letters in its script
    scripts: tuple[str, str] | None = None  # (source, target) scripts, e.g. ("LATIN", "CYRILLIC"); None: learned

    def __post_init__(self):
        if self.max_length_ratio < 1:
            raise ValueError(f"max_length_ratio must be >= 1, got {self.max_length_ratio}")
        if self.max_characters < 1:
            raise ValueError(f"max_characters must be >= 1, got {self.max_characters}")
        if not 0 <= self.min_script_share <= 1:
            raise ValueError(f"min_script_share must be in [0, 1], got {self.min_script_share}")


def script(character: str) -> str | None:
    """The script of a letter, the first word of its Unicode name ("a" -> "LATIN"); None for a non-letter."""
    if not character.isalpha():
        return None
    return unicodedata.name(character, "UNKNOWN").split(" ", 1)[0]


def script_counts(text: str) -> collections.Counter:
    """How many letters of `text` each script has."""
    return collections.Counter(name for name in map(script, text) if name)


def script_share(text: str, name: str) -> float:
    """The share of `text`'s letters in script `name` (1 for a text without letters)."""
    counts = script_counts(text)
    total = sum(counts.values())
    return counts[name] / total if total else 1.0


def normalised(text: str) -> str:
    """`text` casefolded, without punctuation, symbols, digits, whitespace and control characters
    (Unicode categories P, S, N, Z, C): the key of near-duplicates."""
    return "".join(c for c in text.casefold() if unicodedata.category(c)[0] not in "PSNZC" and not c.isspace())


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b("\t".join(parts).encode("utf-8"), digest_size=8).digest()


def exact_key(source: str, target: str) -> bytes:
    """The 8-byte key of exact duplicates."""
    return _digest(source, target)


def near_key(source: str, target: str) -> bytes:
    """The 8-byte key of near-duplicates (`normalised` sides)."""
    return _digest(normalised(source), normalised(target))


def learn_scripts(pairs: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """The script of most letters of the sources and of the targets of `pairs` ("LATIN" if none)."""
    sides = (collections.Counter(), collections.Counter())
    for pair in pairs:
        for counts, text in zip(sides, pair):
            counts.update(script_counts(text))
    return tuple(counts.most_common(1)[0][0] if counts else "LATIN" for counts in sides)


def pair_fault(source: str, target: str, config: CleaningConfig, scripts: tuple[str, str]) -> str | None:
    """The first filter of `FILTERS` before the duplicates that drops the pair, or None."""
    if not source.strip() or not target.strip():
        return "empty"
    shorter, longer = sorted((len(source), len(target)))
    if longer > config.max_characters:
        return "too_long"
    if (longer + _RATIO_SMOOTHING) / (shorter + _RATIO_SMOOTHING) > config.max_length_ratio:
        return "length_ratio"
    if source.strip().casefold() == target.strip().casefold():
        return "copy"
    if any(script_share(text, name) < config.min_script_share for text, name in zip((source, target), scripts)):
        return "wrong_script"
    return None


class Cleaner:
    """Judges pairs one after the other: `fault(source, target)` is the filter that drops the pair
    (remembering it for the duplicates when it is kept), or None; `counts` per filter."""

    def __init__(self, config: CleaningConfig, scripts: tuple[str, str]):
        self.config, self.scripts = config, scripts
        self.counts = collections.Counter({name: 0 for name in FILTERS})
        self.kept = 0
        self._exact: set[bytes] = set()
        self._near: set[bytes] = set()

    def fault(self, source: str, target: str) -> str | None:
        reason = pair_fault(source, target, self.config, self.scripts)
        if reason is None:
            exact, near = exact_key(source, target), near_key(source, target)
            if exact in self._exact:
                reason = "duplicate"
            elif near in self._near:
                reason = "near_duplicate"
            self._exact.add(exact)
            self._near.add(near)
        if reason:
            self.counts[reason] += 1
        else:
            self.kept += 1
        return reason

    def report(self) -> str:
        """One line: the pairs kept and each filter's drops."""
        dropped = ", ".join(f"{name} {self.counts[name]}" for name in FILTERS)
        return f"kept {self.kept} of {self.kept + sum(self.counts.values())} pairs; dropped: {dropped}"


def clean_pairs(
    pairs: Iterable[tuple[str, str]], config: CleaningConfig = CleaningConfig(), cleaner: list | None = None
) -> Iterator[tuple[str, str]]:
    """The pairs of `pairs` that pass every filter, in order, streamed (the first `SCRIPT_SAMPLE`
    are held to learn the scripts when `config.scripts` is None). `cleaner`: a list that gets the
    `Cleaner`, for its counts once the stream is read."""
    pairs = iter(pairs)
    head = list(itertools.islice(pairs, SCRIPT_SAMPLE)) if config.scripts is None else []
    judge = Cleaner(config, config.scripts or learn_scripts(head))
    if cleaner is not None:
        cleaner.append(judge)
    for source, target in itertools.chain(head, pairs):
        if judge.fault(source, target) is None:
            yield source, target


def read_tsv_pairs(path: str, malformed: list) -> Iterator[tuple[str, str]]:
    """(source, target) of each `source<TAB>target` line of the file `path`, streamed; a line that is
    not UTF-8 or has not exactly one tab is appended to `malformed` as "FILE:LINE" and skipped."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                fields = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8").split("\t")
            except UnicodeDecodeError:
                fields = []
            if len(fields) != 2:
                malformed.append(f"{path}:{number}")
                continue
            yield fields[0], fields[1]


def clean_file(source: str, output: str, config: CleaningConfig = CleaningConfig()) -> str:
    """Write the pairs of the TSV `source` that pass the filters to `output`, in order; the report
    (`Cleaner.report`, and the malformed lines skipped)."""
    malformed: list[str] = []
    judges: list[Cleaner] = []
    with open(output, "w", encoding="utf-8", newline="\n") as out:
        for pair in clean_pairs(read_tsv_pairs(source, malformed), config, judges):
            out.write("\t".join(pair) + "\n")
    report = judges[0].report() + f"; scripts {','.join(judges[0].scripts)}"
    if malformed:
        report += f"; skipped {len(malformed)} malformed lines (not UTF-8 or not one tab), the first {malformed[0]}"
    return report
