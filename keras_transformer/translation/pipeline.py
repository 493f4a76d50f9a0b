"""One text pipeline: text in, text out, as TensorFlow ops over string tensors (issue 49).

Every way in runs these stages, in this order, written once here:

1. repair invalid UTF-8 (U+FFFD; not in the TFLite text model, which has no kernel for it);
2. a document split into sentences (`sentences.py`; `split`, then `join` at the end);
3. markup and unknown characters taken out (`markup.span_rule`: the text the model reads);
4. the glossary's terms found in that text (`glossary.py`), added to the request's constraints;
5. the target language's piece put in front (`data.tokenizer.lang_token`'s rule);
6. the source, the target prefix and the constraint phrases to token ids (the source cut to
   max_length - 1 tokens, then EOS: `SubwordTokenizer.source_ids`, the one truncation rule);
7. the search (`search`: beam search or sampling, with the settings' controls and the user's
   modifiers, over the shortlist if any);
8. detokenize, and the spans of step 3 put back where the word alignments say (`markup_restore.py`).

`Pipeline` holds what these stages read (model, tokenizer, settings, glossary, shortlist,
modifiers). `Translator` runs `translate` eagerly on each of its length-sorted batches (the
batching and the threads are its own: they change no result); the SavedModel's signatures
(`exporters/signatures.py`) are `tf.function`s over the same methods. So a Python translation and
an exported model's translation of one request are the same ops.

`Request` is one call's inputs besides the settings; `Request.check` is the one place where a
combination of them is validated (for `Translator`, the command line and serving alike).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.data.tokenizer import lang_token
from keras_transformer.search.alternatives import alternatives as expand
from keras_transformer.search.controls import suppressed_ids
from keras_transformer.search.decoding import beam_search
from keras_transformer.search.sampling import sample_with_seed, sampling_seed
from keras_transformer.search.search import graph_function
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.translation import alignment, sentences
from keras_transformer.translation.glossary import Glossary
from keras_transformer.translation.markup import has_spans, plain_text, span_rule
from keras_transformer.translation.markup_restore import restore

_ALIGNING = threading.Lock()  # threads' first alignments (a service's pool) build one function
_LANG_HEAD, _LANG_TAIL = lang_token("\n").split("\n")  # "<2", ">": a language's piece around its code
_TEXT = r"(?s).*[^\s\p{Z}].*"  # a text with something to translate (not empty, not only spaces)


@dataclasses.dataclass(frozen=True)
class Request:
    """What one call asks besides the settings: `n` translations per text (None: the settings'
    `nbest`, else the beam size; sampling: `num_samples`), `prefixes` (a str for every text, or one
    per text; "" for none), `constraints` (phrases every translation holds: one list for every
    text, or one list per text), `target_lang` (a multilingual model's language: one, or one per
    text), `markup` (spans kept: `markup.py`), `split` (each text a document), `alternatives`
    (the n alternatives after the prefix: `search/alternatives.py`), `alignments` (the best
    translation's word alignment)."""

    n: int | None = None
    prefixes: Any = None
    constraints: Any = None
    target_lang: Any = None
    markup: bool = False
    split: bool = False
    alternatives: bool = False
    alignments: bool = False

    def check(self, decoding: DecodingConfig) -> int:
        """The number of translations per text, or a one-line ValueError for a combination that
        `decoding` (a `DecodingConfig`) cannot serve: what every entry point prints as it is."""
        sampling, search = decoding.sampling, decoding.search
        if self.alternatives:
            if sampling or self.constraints is not None:
                raise ValueError("alternatives are searched by beam search, without constraints: set sampling_topk 1")
            if self.markup or self.split or self.alignments:
                raise ValueError("alternatives give n translations of a sentence: drop markup, split, alignments")
            if self.n is None or self.n < 1:
                raise ValueError(f"alternatives need n >= 1, got {self.n}")
            return self.n
        if self.split and (self.prefixes is not None or self.constraints is not None):
            raise ValueError("a document (split=True) takes no prefixes or constraints: they are a sentence's")
        if sampling:
            n = self.n or sampling.num_samples
            if not 1 <= n <= sampling.num_samples:
                raise ValueError(f"n must be between 1 and num_samples {sampling.num_samples}, got {n}")
        else:
            n = self.n or search.nbest or search.beam_size
            if not 1 <= n <= search.beam_size:
                raise ValueError(f"nbest must be between 1 and the beam size {search.beam_size}, got {n}")
        if self.alignments and n > 1:
            raise ValueError("alignments align the best translation of each text: drop n, nbest, num_samples")
        return n

    def per_text(self, count: int) -> tuple[list[str] | None, list[list[str]] | None, list[str] | None]:
        """(prefixes, constraints, target languages) as one entry per text of `count`, each None
        where not given; a ValueError where a list has another length."""
        from keras_transformer.search.constraints import per_text

        return (
            _one_per_text(self.prefixes, count, "prefixes"),
            per_text(self.constraints, count),
            _one_per_text(self.target_lang, count, "target languages"),
        )


def _one_per_text(values, count: int, name: str) -> list[str] | None:
    if values is None:
        return None
    values = [values] * count if isinstance(values, str) else list(values)
    if len(values) != count:
        raise ValueError(f"{count} texts but {len(values)} {name}")
    return values


class Translation(NamedTuple):
    """`Pipeline.translate`'s output: translations [B, n] string, scores [B, n] float32, alignment
    [B] string (Pharaoh, of the best translation; "" when not asked)."""

    translations: tf.Tensor
    scores: tf.Tensor
    alignment: tf.Tensor


class Pipeline:
    """The text stages (module docstring) of one model: `model`, its `tokenizer`, the settings
    `decoding`, a `glossary`, a `lexical_shortlist` and user `modifiers` (`search.Modifier`s, in
    every search after the settings' controls). `decode(model, source_ids, nbest=, target_prefix=,
    constraints=) -> DecodeResult`, if given, replaces the search of the settings (an export's
    TFLite or XLA search); `lite`: only ops with TFLite kernels where there is a choice."""

    def __init__(
        self,
        model,
        tokenizer,
        decoding: DecodingConfig | None = None,
        glossary: Glossary | None = None,
        lexical_shortlist=None,
        modifiers: Sequence = (),
        decode=None,
        lite: bool = False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.decoding = decoding or DecodingConfig()
        self.glossary = glossary
        self.lexical_shortlist = lexical_shortlist
        self.modifiers = tuple(modifiers)
        self.decode = decode
        self.lite = lite
        self._alignment_function = None
        suppressed = self.decoding.search.suppress_sequences
        self.suppress_ids = () if tokenizer is None else suppressed_ids(tokenizer, suppressed)

    @functools.cached_property
    def span_rule(self) -> str:
        """What markup protects: `markup.span_rule` of the tokenizer (computed once, ~0.1 s)."""
        return span_rule(self.tokenizer)

    @functools.cached_property
    def pieces(self) -> alignment.Pieces:
        return alignment.pieces(self.tokenizer)

    @property
    def max_length(self) -> int:
        return self.model.config.max_length

    # Stages 1-6: text to ids.

    def repaired(self, text):
        """text [B] with invalid UTF-8 replaced by U+FFFD (as it is in a TFLite model: no kernel)."""
        text = tf.convert_to_tensor(text, tf.string)
        return text if self.lite else tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")

    def language(self, text, target_lang):
        """text [B] with the piece of target_lang [B] ("" for none) in front, "<2fr> Jesus wept."
        (`data.tokenizer.tag`'s rule; an empty text stays empty)."""
        target_lang = tf.convert_to_tensor(target_lang, tf.string)
        tagged = tf.strings.join([_LANG_HEAD, target_lang, _LANG_TAIL, " ", text])  # [B]
        return tf.where((target_lang != "") & tf.strings.regex_full_match(text, _TEXT), tagged, text)

    def known_language(self, target_lang):
        """target_lang [B] -> [B] bool: a language this model translates into."""
        langs = tf.constant(list(self.tokenizer.target_langs) or [""])
        return tf.reduce_any(tf.expand_dims(target_lang, 1) == langs[None, :], axis=1) & (target_lang != "")

    def own_language(self, text):
        """text [B] -> (target_lang [B], the text without it): a language's piece a text starts
        with ("<2fr> Amen." -> "fr", "Amen."; "" and the text where there is none)."""
        langs = "|".join(re.escape(lang) for lang in self.tokenizer.target_langs)
        if not langs:
            return tf.fill(tf.shape(text), ""), text
        pattern = f"(?s)^{re.escape(_LANG_HEAD)}({langs}){re.escape(_LANG_TAIL)} ?(.*)$"
        tagged = tf.strings.regex_full_match(text, pattern)  # [B]
        lang = tf.where(tagged, tf.strings.regex_replace(text, pattern, r"\1"), "")
        return lang, tf.where(tagged, tf.strings.regex_replace(text, pattern, r"\2"), text)

    def source_ids(self, text):
        """text [B] (repaired) -> (source_ids [B, S] int32, token counts [B] before the cut):
        `SubwordTokenizer.source_ids`, the one truncation rule of every path."""
        return self.tokenizer.source_ids(text, self.max_length, lite=self.lite)

    def target_ids(self, text):
        """text [B] -> [B, T] int32 token ids as a decoder continues them (no start, no EOS), at
        most max_length - 1, padded."""
        tokens = self.tokenizer.tokenize(text)  # [B, (n)]
        return tokens.to_tensor(default_value=PAD_ID)[:, : self.max_length - 1]  # [B, T]

    def phrase_ids(self, phrases):
        """phrases [B, C] strings ("" none) -> [B, C, T] int32 token ids (`search/constraints.py`)."""
        shape = tf.shape(phrases)  # [B, C]
        ids = self.target_ids(tf.reshape(phrases, [-1]))  # [B * C, T]
        return tf.reshape(ids, tf.concat([shape, tf.shape(ids)[1:]], axis=0))  # [B, C, T]

    def constraints(self, text, constraints=None):
        """The constraint phrases [B, C] of texts [B]: `constraints` [B, C'] ("" none) then those of
        the glossary terms each text holds, a phrase given twice kept once; None without either."""
        if self.glossary is not None:
            terms = self.glossary.constraint_phrases(text)  # [B, G]
            constraints = terms if constraints is None else tf.concat([constraints, terms], axis=1)
            count = tf.shape(constraints)[1]
            earlier = tf.range(count)[None, :] < tf.range(count)[:, None]  # [C, C']: c' < c
            twice = tf.reduce_any((constraints[:, :, None] == constraints[:, None, :]) & earlier, axis=-1)  # [B, C]
            constraints = tf.where(twice, "", constraints)
        return constraints

    def alignments(self, source_ids, target_ids):
        """`alignment.alignments` (source_ids [B, S], target_ids [B, T]) -> Pharaoh strings [B] by
        the settings' `alignment_layer`; eagerly through one tf.function per pipeline, built under
        a lock: threads' first calls trace it once."""
        layer = self.decoding.alignment_layer
        if not tf.executing_eagerly():
            return alignment.alignments(self.model, source_ids, target_ids, self.pieces, layer)
        with _ALIGNING:
            if self._alignment_function is None:
                spec = tf.TensorSpec([None, None], tf.int32)
                self._alignment_function = graph_function(
                    lambda source, target: alignment.alignments(self.model, source, target, self.pieces, layer),
                    input_signature=[spec, spec],
                )
        return self._alignment_function(source_ids, target_ids)

    # Stage 7: the search.

    def search(self, source_ids, n=None, target_prefix=None, constraints=None, seed=None, alternatives=False):
        """source_ids [B, S] -> (ids [B, n, L], scores [B, n]), the `n` best (None: the settings'
        `nbest`, else all), by the settings (or `decode`); `target_prefix` [B, P], `constraints`
        [B, C, T] int32 as `beam_search` takes them; sampling draws with `seed` (an int, or [2]
        int64; None: the settings', else a new one); `alternatives`: `search/alternatives.py`'s."""
        inputs = dict(target_prefix=target_prefix, constraints=constraints)
        if self.decode is not None:
            given = {name: value for name, value in inputs.items() if value is not None}
            result = self.decode(self.model, source_ids, nbest=n, **given)
            return result.ids, result.scores
        decoding, shortlist = self.decoding, self.lexical_shortlist
        if alternatives:
            prefix = tf.zeros([tf.shape(source_ids)[0], 0], tf.int32) if target_prefix is None else target_prefix
            found = expand(self.model, source_ids, prefix, n, decoding, self.suppress_ids, shortlist, self.modifiers)
            return found.ids, found.scores
        if decoding.sampling:
            ids, scores = sample_with_seed(
                self.model, source_ids, sampling_seed(decoding, seed), decoding, self.suppress_ids, shortlist,
                modifiers=self.modifiers, **inputs,
            )  # fmt: skip
            return (ids, scores) if n is None else (ids[:, :n], scores[:, :n])
        options = dict(suppress_ids=self.suppress_ids, lexical_shortlist=shortlist, modifiers=self.modifiers)
        result = beam_search(self.model, source_ids, decoding, nbest=n, **inputs, **options)
        return result.ids, result.scores

    def hypotheses(self, text, n=None, search=None, **inputs):
        """text [B] (the text the model reads) -> (source_ids [B, S], ids [B, n, L], scores [B, n]) by
        `search(source_ids, n, **inputs)` (default: `search`); a text with no tokens gets only pads
        (which detokenize to "") and score 0."""
        source_ids, counts = self.source_ids(self.repaired(text))
        ids, scores = (search or self.search)(source_ids, n, **inputs)  # [B, n, L], [B, n]
        empty = counts == 0  # [B]: nothing to translate
        return source_ids, tf.where(empty[:, None, None], PAD_ID, ids), tf.where(empty[:, None], 0.0, scores)

    def replace(self, **changes) -> Pipeline:
        """A pipeline of the same model and tokenizer with `changes` of the others (`decoding`,
        `glossary`, `lexical_shortlist`, `modifiers`, `decode`, `lite`)."""
        given = dict(
            decoding=self.decoding,
            glossary=self.glossary,
            lexical_shortlist=self.lexical_shortlist,
            modifiers=self.modifiers,
            decode=self.decode,
            lite=self.lite,
        )
        return Pipeline(self.model, self.tokenizer, **{**given, **changes})

    # Stages 3-8: one batch of sentences.

    def translate(
        self,
        text,
        n=None,
        *,
        prefix=None,
        constraints=None,
        target_lang=None,
        markup: bool = False,
        alignments: bool = False,
        search=None,
        **options,
    ) -> Translation:
        """texts [B] (sentences) -> `Translation`: the `n` best of each, with `prefix` [B] ("" for
        none), `constraints` [B, C] ("" for none) and the glossary's terms, into `target_lang` [B]
        ("" for none; a text may also start with its language's piece), `markup` kept, the best
        one's word alignment with `alignments`. `search(source_ids, n, **inputs)` (default: the
        pipeline's) runs stage 7 with the inputs given (target_prefix, constraints and `options`,
        e.g. a sampling `seed`). A text with no tokens translates to "" with score 0."""
        text = self.repaired(text)
        spanned = has_spans(text, self.span_rule) if markup else None  # [B]
        plain = tf.where(spanned, plain_text(text, span=self.span_rule), text) if markup else text  # [B]
        phrases = self.constraints(plain, constraints)
        if phrases is not None and tf.executing_eagerly() and not tf.reduce_any(phrases != ""):
            phrases = None  # nothing to hold: the plain search (the same result, its own faster trace)
        inputs = dict(options)
        if prefix is not None:
            inputs["target_prefix"] = self.target_ids(self.repaired(prefix))  # [B, P]
        if phrases is not None:
            inputs["constraints"] = self.phrase_ids(phrases)  # [B, C, T]
        tagged = plain if target_lang is None else self.language(plain, target_lang)
        source_ids, ids, scores = self.hypotheses(tagged, n, search, **inputs)  # [B, S], [B, n, L], [B, n]
        shape = tf.shape(ids)
        flat_ids = tf.reshape(ids, [-1, shape[2]])  # [B * n, L]
        translations = self.tokenizer.detokenize(flat_ids)  # [B * n]
        pharaoh = tf.fill(tf.shape(text), "")  # [B]
        if markup or alignments:
            hypotheses = tf.repeat(source_ids, shape[1], axis=0)  # [B * n, S]
            flat_pharaoh = self.alignments(hypotheses, flat_ids)  # [B * n]
            if markup:
                sources = tf.repeat(text, shape[1])  # [B * n]
                restored = restore(sources, translations, flat_pharaoh, span=self.span_rule)
                translations = tf.where(tf.repeat(spanned, shape[1]), restored, translations)
            pharaoh = tf.reshape(flat_pharaoh, shape[:2])[:, 0]  # [B]
        return Translation(tf.reshape(translations, shape[:2]), scores, pharaoh)

    # Stage 2: documents.

    def split(self, text, target_lang=None):
        """documents [D] -> (sentences [N], separators [D, (k)], target_lang [N] or None): every
        document's sentences (`sentences.split`, one too long for the model cut further), and each
        sentence's target language: its document's `target_lang` [D], or the piece the document
        starts with."""
        text = self.repaired(text)
        if self.tokenizer.target_langs:
            own, rest = self.own_language(text)
            if target_lang is None:
                target_lang, text = own, tf.where(own != "", rest, text)
        found, separators = sentences.split(text, self.tokenizer, self.max_length)  # [D, (k)] each
        if target_lang is not None:
            target_lang = tf.repeat(tf.convert_to_tensor(target_lang, tf.string), found.row_lengths())  # [N]
        return found.flat_values, separators, target_lang

    @staticmethod
    def join(translations, separators):
        """translations [N] of `split`'s sentences -> [D] documents (`sentences.join`)."""
        return sentences.join(translations, separators)

    def translate_documents(self, text, target_lang=None, markup: bool = False):
        """documents [D] -> [D]: `split`, every sentence's best translation in one batch, `join`."""
        found, separators, langs = self.split(text, target_lang)
        translated = self.translate(found, 1, target_lang=langs, markup=markup).translations[:, 0]  # [N]
        return self.join(translated, separators)
