"""Translation as TensorFlow signatures, for a SavedModel (TF Serving) and TFLite (devices).

`TranslationModule` is a `tf.Module` whose `tf.function`s need no Python code of this package once
saved: the SentencePiece tokenizer (tensorflow-text ops), the search and the detokenizer are
all in the graph. Every text signature is a thin wrapper over the text pipeline
(`translation/pipeline.py`), the one `Translator` runs: with a glossary (`export --glossary FILE`;
`translation/glossary.py`, its terms constants of the graph), the translations of every text
signature but `sample` hold the target terms of the glossary terms their texts hold (beside a
request's own constraints); a user's modifiers (`export(..., modifiers=)`) run in every search.

- `translate(text [B]) -> {translation [B] string, score [B] float32}`: `serving_default`.
- `translate_document(text [B]) -> {translation [B] string}`: each text a document, split into
  sentences (`translation/sentences.py`: the rule of `Translator.translate(..., split=True)`, a
  sentence too long for the model cut further), all of them translated by `translate` in one batch
  (its glossary too) and joined back in order with the whitespace between them. `serving_default`
  stays `translate`, one sentence per text, so TF Serving clients keep working; a client sends
  paragraphs to this signature by name. Not in a multilingual model's export.
- `translate_ids(source_ids [B, S] int32) -> {ids [B, beam, L] int32, scores [B, beam] float32}`;
  a row of more than `max_length` ids is cut to its first `max_length - 1`, then EOS.
- `translate_nbest(text [B]) -> {translations [B, beam] string, scores [B, beam] float32}`.
- `translate_with_alignments(text [B]) -> {translation [B] string, score [B] float32, alignment
  [B] string}`: the alignment in Pharaoh format ("0-0 2-1 ..."; `translation/alignment.py`).
- `translate_with_scores(text [B]) -> {translation [B] string, score [B] float32, confidence [B]
  float32, word_scores [B, W] float32, alignment [B] string}`: the translation with how far to
  trust it (`translation/confidence.py`): `confidence`, exp of the mean log-probability of its
  tokens (EOS included), and each word's (of `translation.split()`, 0 past its words), by teacher
  forcing the translation; the numbers of `Translator.translate(..., return_scores=True)`, whose
  flags (repetition, length ratio, uncovered source words) a client derives from these outputs.
- `translate_markup(text [B]) -> {translation [B] string, score [B] float32}`: tags, entities,
  placeholders, URLs, e-mail addresses and the characters the vocabulary cannot write (the
  tokenizer's `span_rule`, a constant of the graph) kept exactly, placed by the word alignments
  (`translation/markup.py`, `translation/markup_restore.py`: the rule of
  `Translator.translate(..., markup=True)`); the score is the plain text's translation's.
- `translate_with_prefix(text [B], prefix [B]) -> {translation [B], score [B]}`: each translation
  continues its prefix ("" for none; `search/prefix.py`).
- `translate_constrained(text [B], constraints [B, C]) -> {translation [B], score [B]}`: each
  translation holds its row's phrases ("" for none; `search/constraints.py`).
- `score(source [B], target [B]) -> {score [B] float32, log_prob [B] float32, tokens [B] int32}`:
  the given translations' log-probabilities (`search/scoring.py`; a target is cut to its first
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
  translations drawn per text (`search/sampling.py`), best first, with the export's sampling
  settings (with sampling off there, from the whole distribution: `sampling_topk` 0) and its
  `seed` (none: a new seed per request).

Text goes through the same steps as `keras_transformer.translation.translator.Translator`
(`SubwordTokenizer.source_ids`: tokens truncated to `max_length - 1`, then EOS); a text with
no tokens (empty or only spaces) translates to "" with score 0. Invalid UTF-8 bytes are
replaced by U+FFFD (the unknown token) instead of failing the batch.

The search is that of the module's `decoding` (with its controls, shortlist and modifiers), or any
`decode(model, source_ids, nbest=None, target_prefix=, constraints=) -> DecodeResult` given
(`greedy_search`, the TFLite models' search); its output length follows `search.decode_limits`. With a
vocabulary shortlist (`lexical_shortlist`, the model dir's `shortlist.npz`), its arrays are the
module's variables, saved once, and every search (not `score`) runs over the union of its
batch's shortlists (`search/shortlist.py`): `decode` should read the same shortlist.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf
from tensorflow.python.trackable.data_structures import NoDependency

from keras_transformer.config import DecodingConfig, SearchSettings, search_ranges
from keras_transformer.data.shortlist import Shortlist
from keras_transformer.search.beam import BeamSearch
from keras_transformer.search.controls import MinLength, NoRepeatNgram, RepetitionPenalty
from keras_transformer.search.inputs import SearchInputs, user_modifiers
from keras_transformer.search.scoring import score_targets
from keras_transformer.search.search import DecodeResult, graph_function, search
from keras_transformer.special_tokens import EOS_ID, PAD_ID, never_generated
from keras_transformer.translation.confidence import word_probabilities
from keras_transformer.translation.glossary import Glossary
from keras_transformer.translation.pipeline import Pipeline

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
    else one line naming the first that is not: `config.search_ranges` (what `SearchSettings`
    checks), then a request's own bounds (a beam of at most `MAX_BEAM_SIZE`, finite floats)."""
    settings = (beam_size, alpha, max_decoding_length, min_decoding_length, repetition_penalty, ngram_size)
    checks = (
        *((holds, message) for holds, message, _ in search_ranges(*settings)),
        (beam_size <= MAX_BEAM_SIZE, f"beam_size must be at most {MAX_BEAM_SIZE}"),
        (tf.math.is_finite(alpha), "alpha must be finite"),
        (tf.math.is_finite(repetition_penalty), "repetition_penalty must be finite"),
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
    tensorflow-text op). Holds the model's variables, so `tf.saved_model.save` stores them. Every
    text signature is a thin `tf.function` over the text pipeline (`translation/pipeline.py`), the
    one `Translator` runs eagerly.

    `lite_text=True` gives only `translate_text_to_ids(text [B]) -> {ids, scores}`, for TFLite:
    ops with TFLite kernels only, so invalid UTF-8 is not repaired, and no detokenizer
    (tensorflow-text 2.21.1's TFLite SentencePiece detokenizer kernel crashes LiteRT 2.3 and
    tf.lite alike; the device detokenizes with its SentencePiece library).

    `model` may be an `Ensemble`. `decoding`: the settings of the searches, `score` (alpha),
    `sample` (see the module docstring) and `translate_with_alignments` (`alignment_layer`);
    `decode(model, source_ids, nbest=, target_prefix=, constraints=) -> DecodeResult`, if given,
    replaces the search of `decoding` (an export's TFLite search). `glossary`: its terms in every
    text signature. `lexical_shortlist`: the vocabulary shortlist of every search
    (`variables(shortlist)`). `modifiers`: the user's `kt.Modifier`s, traced into every search
    (a modifier that cannot be traced fails the export with its error).
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        decode: Decode | None = None,
        *,
        lite_text: bool = False,
        decoding: DecodingConfig | None = None,
        glossary: Glossary | None = None,
        lexical_shortlist=None,
        modifiers=(),
    ):
        super().__init__(name="translator")
        # The weights are saved once, as the variables the signatures read: tracked one by one,
        # so the SavedModel's saver (what TF Serving and the tf.compat.v1 loader restore with)
        # holds every one of them whatever the model's own tracking (Keras 3 sublayer lists are
        # not in TF's object graph). The model itself is not tracked: through it each Keras
        # variable would be saved a second time beside its tf.Variable (twice the bytes).
        self.model = NoDependency(model)
        self.model_variables = [variable.value for variable in model.variables]
        if lexical_shortlist is not None:  # saved with the module; `variables` made them
            self.shortlist_variables = [lexical_shortlist.table, lexical_shortlist.frequent]
        self.tokenizer = tokenizer
        self._decoding = decoding or DecodingConfig()
        self._banned = never_generated(self._decoding.search.disable_unk)
        self._pipeline = NoDependency(
            Pipeline(
                model,
                tokenizer,
                self._decoding,
                glossary,
                lexical_shortlist,
                user_modifiers(modifiers),
                decode=decode,
                lite=lite_text,
            )
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
            self.translate_with_alignments = graph_function(
                self._translate_with_alignments, input_signature=[TEXT_SPEC]
            )
            self.translate_with_scores = graph_function(self._translate_with_scores, input_signature=[TEXT_SPEC])
            self.translate_markup = graph_function(self._translate_markup, input_signature=[TEXT_SPEC])
            if tokenizer.target_langs:
                self.translate_to = graph_function(self._translate_to, input_signature=[TEXT_SPEC, TARGET_LANG_SPEC])
            else:
                self.translate_document = graph_function(self._translate_document, input_signature=[TEXT_SPEC])

    @property
    def pipeline(self) -> Pipeline:
        return self._pipeline

    def _translate_ids(self, source_ids):
        ids, scores = self.pipeline.search(truncate_source_ids(source_ids, self.model.config.max_length))
        return {"ids": ids, "scores": scores}  # [B, beam, L], [B, beam]

    @staticmethod
    def _best(found):
        return {"translation": found.translations[:, 0], "score": found.scores[:, 0]}  # [B], [B]

    def _translate(self, text):
        return self._best(self.pipeline.translate(text, 1))  # one translation (the exact rule stops sooner)

    def _translate_document(self, text):
        return {"translation": self.pipeline.translate_documents(text)}  # [B]

    def _translate_to(self, text, target_lang):
        lang = self.pipeline.repaired(target_lang)  # [B]
        known = self.pipeline.known_language(lang)  # [B]
        found = self.pipeline.translate(tf.where(known, text, ""), 1, target_lang=lang)  # unknown: nothing to translate
        langs = ", ".join(self.tokenizer.target_langs)
        message = f"unknown target language: this model translates into {langs}"
        return {**self._best(found), "error": tf.where(known, "", message)}  # [B] each

    def _translate_nbest(self, text):
        found = self.pipeline.translate(text)
        return {"translations": found.translations, "scores": found.scores}  # [B, beam], [B, beam]

    def _translate_with_prefix(self, text, prefix):
        return self._best(self.pipeline.translate(text, 1, prefix=prefix))

    def _translate_constrained(self, text, constraints):
        return self._best(self.pipeline.translate(text, 1, constraints=self.pipeline.repaired(constraints)))

    def _score(self, source, target):
        source_ids, _ = self.pipeline.source_ids(self.pipeline.repaired(source))
        scores, log_prob, tokens, _ = score_targets(
            self.model,
            source_ids,
            self.pipeline.target_ids(self.pipeline.repaired(target)),
            alpha=self._decoding.search.alpha,
            disable_unk=self._decoding.search.disable_unk,
        )
        return {"score": scores, "log_prob": log_prob, "tokens": tokens}  # [B], [B], [B]

    def _sample(self, text):
        decoding = self._decoding
        if not decoding.sampling:  # the whole distribution, in the graph (sampling is never XLA's)
            decoding = decoding.replace(sampling_topk=0, jit_compile=False)
        found = self.pipeline.replace(decoding=decoding, glossary=None, decode=None).translate(text)
        return {"translations": found.translations, "scores": found.scores}  # [B, n], [B, n]

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
        per_text = (
            MinLength(tf.where(fine, min_decoding_length, 0)),
            RepetitionPenalty(tf.where(fine, repetition_penalty, default.repetition_penalty)),
            NoRepeatNgram(tf.where(fine, no_repeat_ngram_size, 0)),
        )
        pipeline = self.pipeline
        most = tf.where(fine, max_decoding_length, 1)

        def options_search(source_ids, n, target_prefix=None, constraints=None):
            inputs = SearchInputs(target_prefix, constraints, pipeline.lexical_shortlist)
            modifiers = inputs.modifiers(DecodingConfig(), pipeline.suppress_ids, (*per_text, *pipeline.modifiers))
            lengths = dict(length_a=settings.length_a, length_b=settings.length_b, max_decoding_length=most)
            return search(self.model, source_ids, strategy, modifiers, **lengths, lexical_shortlist=inputs.shortlist)

        found = pipeline.translate(text, 1, search=options_search)
        return {**self._best(found), "error": errors}

    def _translate_with_alignments(self, text):
        found = self.pipeline.translate(text, 1, alignments=True)
        return {**self._best(found), "alignment": found.alignment}  # [B] each

    def _translate_with_scores(self, text):
        found = self.pipeline.translate(text, 1, alignments=True)
        translation = found.translations[:, 0]  # [B]
        source_ids, _ = self.pipeline.source_ids(self.pipeline.repaired(text))  # [B, S]
        target_ids = self.pipeline.target_ids(translation)  # [B, T]
        _, log_prob, tokens, token_log_probs = score_targets(
            self.model,
            source_ids,
            target_ids,
            alpha=self._decoding.search.alpha,
            disable_unk=self._decoding.search.disable_unk,
        )  # [B], [B], [B, T + 1]
        return {
            **self._best(found),
            "confidence": tf.exp(log_prob / tf.cast(tokens, tf.float32)),  # [B]
            "word_scores": word_probabilities(target_ids, token_log_probs, self.pipeline.pieces),  # [B, W]
            "alignment": found.alignment,  # [B]
        }

    def _translate_markup(self, text):
        return self._best(self.pipeline.translate(text, 1, markup=True))

    def _translate_text_to_ids(self, text):
        _, ids, scores = self.pipeline.hypotheses(text)
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
            "translate_with_scores": self.translate_with_scores,
            "translate_markup": self.translate_markup,
            **({"translate_to": self.translate_to} if self.tokenizer.target_langs else {}),
            **({} if self.tokenizer.target_langs else {"translate_document": self.translate_document}),
        }

    def save(self, path: str) -> None:
        tf.saved_model.save(self, path, signatures=self.signatures())
