"""Translation as TensorFlow signatures, for a SavedModel (TF Serving) and TFLite (devices).

`TranslationModule` is a `tf.Module` whose `tf.function`s need no Python code of this package once
saved: the SentencePiece tokenizer (tensorflow-text ops), the search and the detokenizer are
all in the graph.

- `translate(text [B]) -> {translation [B] string, score [B] float32}`: `serving_default`. With a
  glossary (`export --glossary FILE`; `inference/glossary.py`, its terms constants of the graph),
  each translation holds the target terms of the glossary terms its text holds, by the
  constrained search of `translate_constrained`.
- `translate_document(text [B]) -> {translation [B] string}`: each text a document, split into
  sentences (`inference/sentences.py`: the rule of `Translator.translate(..., split=True)`, a
  sentence too long for the model cut further), all of them translated by `translate` in one batch
  (its glossary too) and joined back in order with the whitespace between them. `serving_default`
  stays `translate`, one sentence per text, so TF Serving clients keep working; a client sends
  paragraphs to this signature by name. Not in a multilingual model's export.
- `translate_ids(source_ids [B, S] int32) -> {ids [B, beam, L] int32, scores [B, beam] float32}`;
  a row of more than `max_length` ids is cut to its first `max_length - 1`, then EOS.
- `translate_nbest(text [B]) -> {translations [B, beam] string, scores [B, beam] float32}`.
- `translate_with_alignments(text [B]) -> {translation [B] string, score [B] float32, alignment
  [B] string}`: the alignment in Pharaoh format ("0-0 2-1 ..."; `inference/alignment.py`).
- `translate_markup(text [B]) -> {translation [B] string, score [B] float32}`: tags, entities,
  placeholders, URLs, e-mail addresses and the characters the vocabulary cannot write (the
  tokenizer's `span_rule`, a constant of the graph) kept exactly, placed by the word alignments
  (`inference/markup.py`, `inference/markup_restore.py`: the rule of
  `Translator.translate(..., markup=True)`); the score is the plain text's translation's.
- `translate_with_prefix(text [B], prefix [B]) -> {translation [B], score [B]}`: each translation
  continues its prefix ("" for none; `inference/prefix.py`).
- `translate_constrained(text [B], constraints [B, C]) -> {translation [B], score [B]}`: each
  translation holds its row's phrases ("" for none; `inference/constraints.py`).
- `score(source [B], target [B]) -> {score [B] float32, log_prob [B] float32, tokens [B] int32}`:
  the given translations' log-probabilities (`inference/scoring.py`; a target is cut to its first
  `max_length - 1` tokens).
- `translate_with_options(text [B], beam_size [B], alpha [B], max_decoding_length [B],
  min_decoding_length [B], repetition_penalty [B], no_repeat_ngram_size [B]) -> {translation [B],
  score [B], error [B] string}`: the search's settings per text (`config.SearchSettings`:
  CTranslate2's names), so that one export serves every setting; the batch's largest beam size
  and alpha; settings out of range give "" and a one-line `error` for that text. Slower than
  `translate`, whose settings are fixed.
- `translate_to(text [B], target_lang [B]) -> {translation [B], score [B], error [B] string}`: a
  multilingual model's signature (Johnson et al., 2017), each text into its language ("fr"); a
  language the model does not know translates to "" with score 0 and a one-line `error` ("" when
  fine). Every text signature of a multilingual model also reads a language's piece at the text's
  start ("<2fr> Jesus wept."; `SubwordTokenizer.tokenize_source`).
- `sample(text [B]) -> {translations [B, n] string, scores [B, n] float32}`: n = `num_samples`
  translations drawn per text (`inference/sampling.py`), best first, with the export's sampling
  settings (with sampling off there, from the whole distribution: `sampling_topk` 0) and its
  `seed` (none: a new seed per request).

Text goes through the same steps as `keras_transformer.inference.translator.Translator`
(`SubwordTokenizer.source_ids`: tokens truncated to `max_length - 1`, then EOS); a text with
no tokens (empty or only spaces) translates to "" with score 0. Invalid UTF-8 bytes are
replaced by U+FFFD (the unknown token) instead of failing the batch.

The search is any `decode(model, source_ids, nbest=None) -> DecodeResult` (`beam_search`
by default, or `greedy_search`); its output length follows `search.decode_limits`. With a
vocabulary shortlist (`lexical_shortlist`, the model dir's `shortlist.npz`), its arrays are the
module's variables, saved once, and every search (not `score`) runs over the union of its
batch's shortlists (`inference/shortlist.py`): `decode` should read the same shortlist.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf
from tensorflow.python.trackable.data_structures import NoDependency

from keras_transformer.config import DecodingConfig, SearchSettings
from keras_transformer.data.shortlist import Shortlist
from keras_transformer.inference import alignment, sentences
from keras_transformer.inference.beam import BeamSearch
from keras_transformer.inference.controls import MinLength, NoRepeatNgram, RepetitionPenalty, controls, suppressed_ids
from keras_transformer.inference.decoding import beam_search
from keras_transformer.inference.glossary import Glossary
from keras_transformer.inference.markup import plain_text, span_rule
from keras_transformer.inference.markup_restore import restore
from keras_transformer.inference.sampling import sample_with_seed
from keras_transformer.inference.scoring import score_targets
from keras_transformer.inference.search import DecodeResult, graph_function, search
from keras_transformer.special_tokens import EOS_ID, PAD_ID, never_generated

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
PREFIX_TEXT_SPEC = tf.TensorSpec([None], tf.string, name="prefix")
CONSTRAINTS_TEXT_SPEC = tf.TensorSpec([None, None], tf.string, name="constraints")
SOURCE_TEXT_SPEC = tf.TensorSpec([None], tf.string, name="source")
TARGET_TEXT_SPEC = tf.TensorSpec([None], tf.string, name="target")
TARGET_LANG_SPEC = tf.TensorSpec([None], tf.string, name="target_lang")
IDS_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")
# translate_with_options' settings, one value per text (CTranslate2's names; `config.SearchSettings`).
OPTIONS_SPECS = (
    tf.TensorSpec([None], tf.int32, name="beam_size"),
    tf.TensorSpec([None], tf.float32, name="alpha"),
    tf.TensorSpec([None], tf.int32, name="max_decoding_length"),
    tf.TensorSpec([None], tf.int32, name="min_decoding_length"),
    tf.TensorSpec([None], tf.float32, name="repetition_penalty"),
    tf.TensorSpec([None], tf.int32, name="no_repeat_ngram_size"),
)

Decode = Callable[..., DecodeResult]


MAX_BEAM_SIZE = 64  # translate_with_options' largest beam: a request cannot make one search unbounded


def options_errors(beam_size, alpha, max_decoding_length, min_decoding_length, repetition_penalty, ngram_size):
    """[B] string: "" where a text's `translate_with_options` settings ([B] each) are in range,
    else one line naming the first that is not (`config.SearchSettings` checks the same)."""
    finite = lambda x: tf.math.is_finite(x)
    checks = (
        ((beam_size >= 1) & (beam_size <= MAX_BEAM_SIZE), f"beam_size must be between 1 and {MAX_BEAM_SIZE}"),
        (finite(alpha) & (alpha >= 0), "alpha must be >= 0"),
        (max_decoding_length >= 1, "max_decoding_length must be >= 1"),
        (min_decoding_length >= 0, "min_decoding_length must be >= 0"),
        (min_decoding_length < max_decoding_length, "min_decoding_length must be below max_decoding_length"),
        (finite(repetition_penalty) & (repetition_penalty > 0), "repetition_penalty must be > 0"),
        (ngram_size >= 0, "no_repeat_ngram_size must be >= 0"),
    )
    errors = tf.fill(tf.shape(beam_size), "")
    for fine, message in reversed(checks):  # the first failing check's message wins
        errors = tf.where(fine, errors, message)
    return errors


def variables(shortlist: Shortlist | None) -> Shortlist | None:
    """`shortlist` with its arrays as (non-trainable) variables, which a `TranslationModule` saves
    once, whatever the number of signatures that read them (constants would be copied into each)."""
    if shortlist is None:
        return None
    table, frequent = (tf.Variable(array, trainable=False) for array in (shortlist.table, shortlist.frequent))
    return Shortlist(table, frequent, shortlist.pairs)


def truncate_source_ids(source_ids, max_length: int):
    """source_ids [B, S] -> [B, min(S, max_length)]: a row of more than max_length ids keeps its
    first max_length - 1, then EOS, as a text source is truncated. TFLite builtin ops only."""
    lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [B]
    kept = source_ids[:, :max_length]  # [B, S']
    last = tf.one_hot(max_length - 1, tf.shape(kept)[1], on_value=True, off_value=False, dtype=tf.bool)  # [S']
    cut = tf.expand_dims(lengths > max_length, 1)  # [B, 1]
    return tf.where(cut & last, EOS_ID, kept)  # [B, S']


class TranslationModule(tf.Module):
    """The exported signatures of one model; `tokenizer=None` gives an ids-only module (no
    tensorflow-text op). Holds the model's variables, so `tf.saved_model.save` stores them.

    `lite_text=True` gives only `translate_text_to_ids(text [B]) -> {ids, scores}`, for TFLite:
    ops with TFLite kernels only, so invalid UTF-8 is not repaired, and no detokenizer
    (tensorflow-text 2.21.1's TFLite SentencePiece detokenizer kernel crashes LiteRT 2.3 and
    tf.lite alike; the device detokenizes with its SentencePiece library).

    `model` may be an `Ensemble`. `decoding`: the settings of `score` (alpha), `sample` (see the
    module docstring) and `translate_with_alignments` (the decoder layer whose cross-attention
    it reads, `alignment_layer`). `lexical_shortlist`: the vocabulary shortlist of `sample` and
    `translate_with_options` (`variables(shortlist)`; `decode` reads it for the other searches).
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        decode: Decode = beam_search,
        *,
        lite_text: bool = False,
        decoding: DecodingConfig | None = None,
        glossary: Glossary | None = None,
        lexical_shortlist=None,
    ):
        super().__init__(name="translator")
        # The weights are saved once, as the variables the signatures read: tracked one by one,
        # so the SavedModel's saver (what TF Serving and the tf.compat.v1 loader restore with)
        # holds every one of them whatever the model's own tracking (Keras 3 sublayer lists are
        # not in TF's object graph). The model itself is not tracked: through it each Keras
        # variable would be saved a second time beside its tf.Variable (twice the bytes).
        self.model = NoDependency(model)
        self.model_variables = [variable.value for variable in model.variables]
        self._shortlist = lexical_shortlist
        if lexical_shortlist is not None:  # saved with the module; `variables` made them
            self.shortlist_variables = [lexical_shortlist.table, lexical_shortlist.frequent]
        self.tokenizer = tokenizer
        self._decode = decode
        self._lite_text = lite_text
        self._decoding = decoding or DecodingConfig()
        self._glossary = glossary
        self._banned = never_generated(self._decoding.search.disable_unk)
        self._suppress_ids = (
            () if tokenizer is None else suppressed_ids(tokenizer, self._decoding.search.suppress_sequences)
        )
        self.translate_ids = graph_function(self._translate_ids, input_signature=[IDS_SPEC])
        if tokenizer is not None and lite_text:
            self.translate_text_to_ids = graph_function(self._translate_text_to_ids, input_signature=[TEXT_SPEC])
        elif tokenizer is not None:
            self.translate = graph_function(self._translate, input_signature=[TEXT_SPEC])
            self.translate_nbest = graph_function(self._translate_nbest, input_signature=[TEXT_SPEC])
            self.translate_with_prefix = graph_function(
                self._translate_with_prefix, input_signature=[TEXT_SPEC, PREFIX_TEXT_SPEC]
            )
            self.translate_constrained = graph_function(
                self._translate_constrained, input_signature=[TEXT_SPEC, CONSTRAINTS_TEXT_SPEC]
            )
            self.score = graph_function(self._score, input_signature=[SOURCE_TEXT_SPEC, TARGET_TEXT_SPEC])
            self.sample = graph_function(self._sample, input_signature=[TEXT_SPEC])
            self.translate_with_options = graph_function(
                self._translate_with_options, input_signature=[TEXT_SPEC, *OPTIONS_SPECS]
            )
            self._pieces = alignment.pieces(tokenizer)
            self.translate_with_alignments = graph_function(
                self._translate_with_alignments, input_signature=[TEXT_SPEC]
            )
            self._span_rule = span_rule(tokenizer)
            self.translate_markup = graph_function(self._translate_markup, input_signature=[TEXT_SPEC])
            if tokenizer.target_langs:
                self.translate_to = graph_function(self._translate_to, input_signature=[TEXT_SPEC, TARGET_LANG_SPEC])
            else:
                self.translate_document = graph_function(self._translate_document, input_signature=[TEXT_SPEC])

    def _translate_ids(self, source_ids):
        result = self._decode(self.model, truncate_source_ids(source_ids, self.model.config.max_length))
        return {"ids": result.ids, "scores": result.scores}  # [B, beam, L], [B, beam]

    def _repaired(self, text):
        """text [B] with invalid UTF-8 replaced by U+FFFD (not in the TFLite model: no kernel)."""
        return text if self._lite_text else tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")

    def _target_ids(self, text):
        """text [B] -> [B, T] int32 token ids as a decoder continues them (no start, no EOS), at
        most max_length - 1, padded."""
        tokens = self.tokenizer.tokenize(self._repaired(text))  # [B, (n)]
        return tokens.to_tensor(default_value=PAD_ID)[:, : self.model.config.max_length - 1]  # [B, T]

    def _search_text(self, text, nbest=None, search=None):
        """text [B] -> (ids [B, n, L], scores [B, n]), the `nbest` best (default: every beam) by
        `search(source_ids) -> DecodeResult` (default: the module's `decode`); a text with no
        tokens gets only pads (which detokenize to "") and score 0."""
        max_length = self.model.config.max_length
        source_ids, token_counts = self.tokenizer.source_ids(self._repaired(text), max_length, lite=self._lite_text)
        empty = token_counts == 0  # [B]
        if search is None:
            result = self._decode(self.model, source_ids, nbest=nbest)
        else:
            result = search(source_ids)
        ids = tf.where(empty[:, None, None], PAD_ID, result.ids)  # [B, n, L]
        return ids, tf.where(empty[:, None], 0.0, result.scores)

    def _detokenize_beams(self, ids):
        """ids [B, beam, L] -> strings [B, beam]."""
        shape = tf.shape(ids)
        flat = self.tokenizer.detokenize(tf.reshape(ids, [-1, shape[2]]))  # [B * beam]
        return tf.reshape(flat, shape[:2])

    def _translate(self, text):
        if self._glossary is not None:  # constants of the graph: the terms' patterns and phrases
            return self._translate_constrained(text, self._glossary.constraint_phrases(text))
        ids, scores = self._search_text(text, nbest=1)  # one translation (the exact rule stops sooner)
        return {"translation": self.tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0]}  # [B], [B]

    def _translate_document(self, text):
        found, separators = sentences.split(self._repaired(text), self.tokenizer, self.model.config.max_length)
        translations = self._translate(found.flat_values)["translation"]  # [N]: every sentence in one batch
        return {"translation": sentences.join(translations, separators)}  # [B]

    def _translate_to(self, text, target_lang):
        langs = self.tokenizer.target_langs
        lang = self._repaired(target_lang)  # [B]
        known = tf.reduce_any(tf.expand_dims(lang, 1) == tf.constant(langs)[None, :], axis=1)  # [B]
        tagged = tf.strings.join(["<2", lang, "> ", self._repaired(text)])  # [B]: "<2fr> Jesus wept." (lang_token)
        translation = self._translate(tf.where(known, tagged, ""))  # an unknown language: nothing to translate
        message = f"unknown target language: this model translates into {', '.join(langs)}"
        return {**translation, "error": tf.where(known, "", message)}  # [B] each

    def _translate_nbest(self, text):
        ids, scores = self._search_text(text)
        return {"translations": self._detokenize_beams(ids), "scores": scores}  # [B, beam], [B, beam]

    def _translate_with_prefix(self, text, prefix):
        target_prefix = self._target_ids(prefix)  # [B, P]
        ids, scores = self._search_text(
            text, search=lambda source_ids: self._decode(self.model, source_ids, nbest=1, target_prefix=target_prefix)
        )
        return {"translation": self.tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0]}  # [B], [B]

    def _translate_constrained(self, text, constraints):
        shape = tf.shape(constraints)  # [B, C]
        ids = self._target_ids(tf.reshape(constraints, [-1]))  # [B * C, T]
        phrases = tf.reshape(ids, tf.concat([shape, tf.shape(ids)[1:]], axis=0))  # [B, C, T]
        ids, scores = self._search_text(
            text, search=lambda source_ids: self._decode(self.model, source_ids, nbest=1, constraints=phrases)
        )
        return {"translation": self.tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0]}  # [B], [B]

    def _score(self, source, target):
        source_ids, _ = self.tokenizer.source_ids(self._repaired(source), self.model.config.max_length)
        scores, log_prob, tokens, _ = score_targets(
            self.model,
            source_ids,
            self._target_ids(target),
            alpha=self._decoding.search.alpha,
            disable_unk=self._decoding.search.disable_unk,
        )
        return {"score": scores, "log_prob": log_prob, "tokens": tokens}  # [B], [B], [B]

    def _sample(self, text):
        decoding = self._decoding
        if not decoding.sampling:  # the whole distribution, in the graph (sampling is never XLA's)
            decoding = decoding.replace(sampling_topk=0, jit_compile=False)
        if decoding.sampling.seed is None:  # a new stream per request
            seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
        else:
            seed = tf.constant([decoding.sampling.seed, 0], tf.int64)
        ids, scores = self._search_text(
            text,
            search=lambda source_ids: DecodeResult(
                *sample_with_seed(self.model, source_ids, seed, decoding, self._suppress_ids, self._shortlist)
            ),
        )
        return {"translations": self._detokenize_beams(ids), "scores": scores}  # [B, n], [B, n]

    def _translate_with_options(
        self, text, beam_size, alpha, max_decoding_length, min_decoding_length, repetition_penalty, no_repeat_ngram_size
    ):
        """`translate` with these search settings given per text ([B] each: TF Serving's batching
        may merge requests; `OPTIONS_SPECS`), the export's own for the rest. The lengths, the
        repetition penalty and the n-gram size apply per text; one search has one beam size and
        one length penalty, the batch's largest. A text whose settings are out of range
        (`options_errors`) translates to "" with score 0 and a one-line `error`, the batch's
        other texts unharmed."""
        errors = options_errors(
            beam_size, alpha, max_decoding_length, min_decoding_length, repetition_penalty, no_repeat_ngram_size
        )  # [B]
        fine = errors == ""  # [B]
        text = tf.where(fine, text, "")  # nothing to translate
        default = SearchSettings()
        beam_size, alpha = tf.where(fine, beam_size, 1), tf.where(fine, alpha, 0.0)  # out of the batch's maxima
        largest = lambda values, least: tf.reduce_max(tf.concat([values, [least]], axis=0))  # an empty batch: least
        settings = self._decoding.search
        strategy = BeamSearch(largest(beam_size, 1), largest(alpha, 0.0), settings.patience, 1, self._banned)
        modifiers = (
            MinLength(tf.where(fine, min_decoding_length, 0)),
            RepetitionPenalty(tf.where(fine, repetition_penalty, default.repetition_penalty)),
            NoRepeatNgram(tf.where(fine, no_repeat_ngram_size, 0)),
            *controls(default, self._suppress_ids),  # the export's suppressed sequences
        )
        most = tf.where(fine, max_decoding_length, 1)

        def options_search(source_ids):
            lengths = {"length_a": settings.length_a, "length_b": settings.length_b}
            found = search(
                self.model,
                source_ids,
                strategy,
                modifiers,
                max_decoding_length=most,
                lexical_shortlist=self._shortlist,
                **lengths,
            )
            return DecodeResult(*found)

        ids, scores = self._search_text(text, search=options_search)
        translation = {"translation": self.tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0]}  # [B], [B]
        return {**translation, "error": errors}

    def _translate_with_alignments(self, text):
        ids, scores = self._search_text(text, nbest=1)  # [B, 1, L], [B, 1]
        source_ids, _ = self.tokenizer.source_ids(self._repaired(text), self.model.config.max_length)  # as searched
        layer = self._decoding.alignment_layer
        pharaoh = alignment.alignments(self.model, source_ids, ids[:, 0], self._pieces, layer)  # [B]
        return {"translation": self.tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0], "alignment": pharaoh}

    def _translate_markup(self, text):
        text = self._repaired(text)
        aligned = self._translate_with_alignments(plain_text(text, span=self._span_rule))
        translation = restore(text, aligned["translation"], aligned["alignment"], span=self._span_rule)  # [B]
        return {"translation": translation, "score": aligned["score"]}

    def _translate_text_to_ids(self, text):
        ids, scores = self._search_text(text)
        return {"ids": ids, "scores": scores}  # [B, beam, L], [B, beam]

    def signatures(self) -> dict:
        """The SavedModel signatures; the first is `serving_default`."""
        if self.tokenizer is None:
            return {"serving_default": self.translate_ids}
        return {
            "serving_default": self.translate,
            "translate_ids": self.translate_ids,
            "translate_nbest": self.translate_nbest,
            "translate_with_prefix": self.translate_with_prefix,
            "translate_constrained": self.translate_constrained,
            "score": self.score,
            "sample": self.sample,
            "translate_with_options": self.translate_with_options,
            "translate_with_alignments": self.translate_with_alignments,
            "translate_markup": self.translate_markup,
            **({"translate_to": self.translate_to} if self.tokenizer.target_langs else {}),
            **({} if self.tokenizer.target_langs else {"translate_document": self.translate_document}),
        }

    def save(self, path: str) -> None:
        tf.saved_model.save(self, path, signatures=self.signatures())
