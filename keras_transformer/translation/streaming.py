"""Any number of lines through a translator, in order, with bounded memory (CTranslate2's
`translate_iterable` / `score_iterable`): the lines are read lazily, `max_batch_tokens` source tokens
at a time; each chunk is translated (the translator sorts it by length into its batches) and its
results yielded before the next chunk is read. Memory holds one chunk, whatever the input's length.

`Translator.translate_iterable(lines, max_batch_tokens=...)` and
`Translator.score_iterable(sources, targets, max_batch_tokens=...)` call these; the service's batcher
counts tokens with `token_counter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import sentencepiece

DEFAULT_MAX_BATCH_TOKENS = 4096
BYTES_PER_TOKEN = 4  # the estimate where no tokenizer is at hand: SentencePiece pieces average a few bytes


def token_counter(translator) -> Callable[[str], int]:
    """text -> its source tokens, EOS included: by the translator's SentencePiece model (`tokenizer`),
    else estimated from its UTF-8 bytes."""
    tokenizer = getattr(translator, "tokenizer", None)
    if tokenizer is None:
        return lambda text: len(text.encode("utf-8")) // BYTES_PER_TOKEN + 1
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    return lambda text: len(processor.encode(text)) + 1


def chunks(items: Iterable, size: Callable, max_tokens: int) -> Iterator[list]:
    """Consecutive lists of `items`, each of at most `max_tokens` by `size(item)` (an item larger than
    that alone), read lazily."""
    if max_tokens < 1:
        raise ValueError(f"max_batch_tokens must be >= 1, got {max_tokens}")
    chunk, tokens = [], 0
    for item in items:
        cost = size(item)
        if chunk and tokens + cost > max_tokens:
            yield chunk
            chunk, tokens = [], 0
        chunk.append(item)
        tokens += cost
    if chunk:
        yield chunk


def translate_iterable(
    translator, lines: Iterable[str], max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, **options
) -> Iterator[str]:
    """The translation of each of `lines`, in order, as `translator.translate(chunk, **options)` gives
    it, `max_batch_tokens` source tokens at a time."""
    count = token_counter(translator)
    for chunk in chunks(lines, count, max_batch_tokens):
        yield from translator.translate(chunk, **options)


def score_iterable(
    translator,
    sources: Iterable[str],
    targets: Iterable[str],
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    **options,
) -> Iterator:
    """The `Score` of each (source, target) pair, in order (`translator.score`), `max_batch_tokens`
    source and target tokens at a time; ValueError if one iterable ends before the other."""
    count = token_counter(translator)
    pairs = _strict_pairs(sources, targets)
    for chunk in chunks(pairs, lambda pair: count(pair[0]) + count(pair[1]), max_batch_tokens):
        yield from translator.score([s for s, _ in chunk], [t for _, t in chunk], **options)


def _strict_pairs(sources: Iterable[str], targets: Iterable[str]) -> Iterator[tuple[str, str]]:
    missing = object()
    sources, targets = iter(sources), iter(targets)
    while True:
        source, target = next(sources, missing), next(targets, missing)
        if source is missing and target is missing:
            return
        if source is missing or target is missing:
            raise ValueError("sources and targets have different lengths")
        yield source, target
