"""Beam search and greedy decoding: the entry points (§6.1).

`beam_search` puts together the search of one call: the strategy (`beam.BeamSearch`), the
modifiers of its inputs (a target prefix: `prefix.py`; lexical constraints: `constraints.py`)
and of its settings (the controls: `controls.py`), traced once per model and settings
(`search.compiled`), with XLA on inputs padded to a few bucket shapes when `jit_compile` is on.
The loop itself is `search.search`. Given a `lexical_shortlist`, the search's vocabulary is the union
of the batch's vocabulary shortlists (`shortlist.py`).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.search.beam import BeamSearch
from keras_transformer.search.inputs import SearchInputs, limits, user_modifiers
from keras_transformer.search.search import (
    SOURCE_SPEC,
    DecodeResult,
    check_source_ids,
    compiled,
    decode_limits,
    longest,
    search,
    traced_settings,
)
from keras_transformer.search.shortlist import check_shortlist
from keras_transformer.special_tokens import PAD_ID, never_generated


def beam_strategy(decoding: DecodingConfig) -> BeamSearch:
    """The beam search of `decoding`'s search settings."""
    settings = decoding.search
    nbest = settings.beam_size if settings.nbest is None else settings.nbest
    return BeamSearch(
        settings.beam_size, settings.alpha, settings.patience, nbest, never_generated(settings.disable_unk)
    )


def search_beams(
    model,
    source_ids,
    decoding: DecodingConfig,
    inputs: SearchInputs = SearchInputs(),
    *,
    static_shapes: bool = False,
    suppress_ids=(),
    modifiers: tuple = (),
):
    """The traceable beam search: source_ids [B, S] int32 -> (ids [B, n, L] int32, scores [B, n]
    float32), the n = `nbest` (default K) best hypotheses, by the stopping rule `patience`;
    `inputs` (`inputs.SearchInputs`): with a target prefix [B, P] int32 (pad-padded), every
    hypothesis starts with its sentence's prefix; with constraints [B, C, T] int32, every phrase is
    in the output; with a shortlist, the search's vocabulary is the union of the batch's shortlists
    (`shortlist.py`). `suppress_ids`: the `suppress_sequences` as token ids; `modifiers`: the
    user's, after the settings' controls. Wrap it in `tf.function` or a `tf.Module` signature;
    `beam_search` is the checked, compiled entry point; `search.search` says what L is."""
    return search(
        model,
        source_ids,
        beam_strategy(decoding),
        inputs.modifiers(decoding, suppress_ids, modifiers),
        **limits(decoding),
        static_shapes=static_shapes,
        lexical_shortlist=inputs.shortlist,
    )


BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)  # XLA compiles once per shape: batches padded to these
LENGTH_BUCKET = 16  # and source lengths to multiples of this


def bucket_shape(batch, width, max_length: int):
    """The shape XLA compiles a [batch, width] input at: the batch rounded up to `BATCH_BUCKETS`
    (itself past the last), the width to a multiple of `LENGTH_BUCKET` (at most max_length)."""
    buckets = tf.constant(BATCH_BUCKETS, tf.int32)
    batch = tf.where(
        batch > BATCH_BUCKETS[-1], batch, tf.reduce_min(tf.where(buckets >= batch, buckets, BATCH_BUCKETS[-1]))
    )
    return batch, tf.minimum(-(-width // LENGTH_BUCKET) * LENGTH_BUCKET, max_length)


def _xla_search(model, source_ids, decoding: DecodingConfig, suppress_ids=(), modifiers=()):
    """`search_beams` compiled by XLA on the input padded to a bucket shape (padding rows and
    columns change no result: `decode_limits` ends an empty source at once, and pad tokens are
    masked), so that a few compilations serve every batch; the result is cut back to the input's
    batch and to the longest limit among its sentences, as `search_beams` returns it."""
    config = model.config
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    padded_batch, padded_width = bucket_shape(batch, width, config.max_length)
    padding = [[0, padded_batch - batch], [0, padded_width - width]]
    static = dict(decoding=decoding, suppress_ids=suppress_ids, modifiers=modifiers)
    search_function = compiled(model, "beam", search_beams, jit_compile=True, static_shapes=True, **static)
    ids, scores = search_function(tf.pad(source_ids, padding, constant_values=PAD_ID))
    settings, cap = decoding.search, decoding.runtime.max_decode_length
    cap = config.max_length if cap is None else min(cap, config.max_length)
    if settings.max_decoding_length is not None:
        cap = min(cap, settings.max_decoding_length)
    length = longest(decode_limits(source_ids, cap, settings.length_a, settings.length_b))
    return ids[:batch, :, :length], scores[:batch]


def _search_with(model, source_ids, structure: SearchInputs, decoding: DecodingConfig, suppress_ids=(), modifiers=()):
    """`search_beams` with the inputs of a traced `structure` (`SearchInputs.structure`)."""
    return search_beams(
        model, source_ids, decoding, SearchInputs.of(structure), suppress_ids=suppress_ids, modifiers=modifiers
    )


def traced_beam_search(
    model, decoding: DecodingConfig, inputs: SearchInputs = SearchInputs(), suppress_ids=(), modifiers=()
):
    """The `tf.function` that `beam_search` calls: (source_ids, `inputs.structure()`) -> (ids,
    scores), traced once per model, inputs given and graph-shaping settings (`search.traced_settings`)."""
    spec = inputs.spec()
    static = dict(decoding=traced_settings(decoding), suppress_ids=suppress_ids, modifiers=modifiers)
    return compiled(model, f"beam{tuple(map(bool, spec))}", _search_with, inputs=(SOURCE_SPEC, spec), **static)


def beam_search(
    model,
    source_ids,
    decoding: DecodingConfig | None = None,
    *,
    target_prefix=None,
    constraints=None,
    suppress_ids=(),
    lexical_shortlist=None,
    modifiers=(),
    **overrides,
) -> DecodeResult:
    """Beam search with the GNMT length penalty (§6.1; Wu et al., 2016): the `nbest` (default
    `beam_size`) best hypotheses of every sentence, best first.

    `decoding`: the settings (`DecodingConfig`, whose parts' docstrings say what each does;
    default: the paper's), with `overrides` of its settings by name, e.g. `beam_search(model,
    ids, beam_size=1, alpha=0.0)`. source_ids: [B, S] int32, padded with `PAD_ID`, at most the
    model's `max_length` long (`Translator` truncates longer sources with a warning).
    `max_decode_length`: a static output length (for fixed-shape exports), also a cap on every
    sentence's limit `length_a * |source| + length_b`. `jit_compile`: run the search compiled
    by XLA, on inputs padded to a few bucket shapes (each compiled once, seconds each; then
    faster than the TensorFlow graph at small batches). With the exact stopping rule
    (`patience=None`) a sentence stops once no alive hypothesis can beat its `nbest` best
    finished ones (so `nbest=1` stops sooner, with the same best hypothesis).
    `target_prefix`: [B, P] int32 token ids, left-aligned, padded with PAD_ID (no start or EOS):
    every hypothesis of sentence b starts with row b (`prefix.py`).
    `constraints`: [B, C, T] int32, C phrases of at most T token ids per sentence, left-aligned,
    padded with PAD_ID (an all-pad phrase: none): every phrase appears in the output, by dynamic
    beam allocation (`constraints.py`); hypotheses that meet every phrase come first, and a
    phrase is met only if the length limit leaves room for it. A search with either is never
    compiled by XLA (`jit_compile` is ignored), and traced apart from the plain one.
    `suppress_ids`: `suppress_sequences` as token ids (a tuple of tuples; `Translator` tokenizes
    them). `lexical_shortlist` (a `data.shortlist.Shortlist`): the search's vocabulary is the union
    of the batch's vocabulary shortlists (`shortlist.py`: the ids of a prefix, constraints and
    suppressed sequences are kept too), never with XLA or `max_decode_length`; the `shortlist`
    setting, which tells `Translator` and `export` to read the model dir's, needs one.
    `modifiers`: the user's own `kt.Modifier` instances (`search.Modifier`), applied after the
    settings' controls in every step; traced into the search (one trace per tuple of them).
    Returns ids [B, nbest, L] and scores [B, nbest].
    """
    decoding = (decoding or DecodingConfig()).replace(**overrides)
    check_shortlist(decoding, lexical_shortlist)
    source_ids = check_source_ids(source_ids, model.config.max_length)
    inputs = SearchInputs(target_prefix, constraints, lexical_shortlist).checked(source_ids.shape[0])
    suppress_ids, modifiers = tuple(map(tuple, suppress_ids)), user_modifiers(modifiers)
    if decoding.runtime.jit_compile and not inputs.given():
        if not model.built:  # XLA cannot create the variables
            model.build()
        static = dict(decoding=traced_settings(decoding), suppress_ids=suppress_ids, modifiers=modifiers)
        ids, scores = compiled(model, "bucketed_xla", _xla_search, **static)(source_ids)
    else:
        search_function = traced_beam_search(model, decoding, inputs, suppress_ids, modifiers)
        ids, scores = search_function(source_ids, inputs.structure())
    return DecodeResult(ids=ids, scores=scores)


def greedy_search(
    model, source_ids, *, target_prefix=None, constraints=None, lexical_shortlist=None, **overrides
) -> DecodeResult:
    """Greedy decoding, which is beam search with beam_size 1 and alpha 0: ids [B, 1, L], scores
    [B, 1] = the sum of the chosen tokens' log-probabilities; `overrides` of the other
    `DecodingConfig` settings (e.g. `length_b`); `target_prefix`, `constraints` and
    `lexical_shortlist` as `beam_search`'s (greedy with constraints writes each phrase as soon as
    it can: weak)."""
    decoding = DecodingConfig.greedy(**overrides)
    given = dict(target_prefix=target_prefix, constraints=constraints, lexical_shortlist=lexical_shortlist)
    return beam_search(model, source_ids, decoding, **given)
