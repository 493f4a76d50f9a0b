"""A shared source/target subword vocabulary (§5.1: byte-pair encoding, 37000 tokens, shared).

The vocabulary is a SentencePiece unigram model (Kudo & Richardson, 2018) learned with
`sentencepiece` from a uniform sample of the training text (or an existing model brought by
the user, `load`, if it reserves the ids below); encoding and decoding run as TensorFlow ops through
tensorflow-text's `FastSentencepieceTokenizer`, so the tokenizer can live inside a graph, a
SavedModel and a TFLite model. Decoding restores spaces and punctuation exactly
(SentencePiece is lossless up to its NFKC normalisation), which sacreBLEU needs.

Subword regularisation (Kudo, 2018): `tokenize(strings, alpha=a)` samples one segmentation of
each string from the unigram model's lattice, p(segmentation) proportional to its probability
to the power a, afresh at every call; the training pipeline uses it to show the model several
segmentations of a sentence, while inference always takes the most probable one.

Every vocabulary reserves the ids of `special_tokens` (pad, start = SentencePiece's BOS, EOS,
unknown). Byte fallback: a vocabulary of `BYTE_FALLBACK_MIN_VOCAB` pieces or more is learned with
SentencePiece's `byte_fallback`, 256 pieces "<0x00>" ... "<0xFF>" that spell a character the
pieces lack as its UTF-8 bytes, so every character round-trips (an emoji, a CJK name, a rare
symbol); a smaller one would give a quarter or more of its slots to bytes, and is learned without.
Without byte fallback (smaller vocabularies, and every model dir of 0.1.x) a character that the
model never saw maps to the unknown id, which `detokenize` drops. tensorflow-text's
`FastSentencepieceTokenizer` ignores byte pieces (it gives the unknown id), so a byte-fallback
vocabulary is encoded and decoded by its regular `SentencepieceTokenizer` (the SentencePiece
library's op), made where it is called (`_sentencepiece`); the text TFLite model, which needs the
fast one's TFLite kernel, maps such characters to the unknown id (`source_ids(lite=True)`).

Two SentencePiece models over one vocabulary (OPUS-MT's layout, Tiedemann & Thottingal, 2020):
`SubwordTokenizer(source_proto, target_proto)` encodes sources with the first and targets with the
second. Their piece lists are the same (one vocabulary, one id per piece); their scores and types
are each side's own, a piece that side's SentencePiece lacks being one its encoding never takes
(`importers.common`). The source side is `tokenize_source` and `source_ids`; `tokenize` (training
targets, scored targets, prefixes, constraints) and `detokenize` are the target side's. One model
of both sides' text (the usual case here) is both sides: `target_proto` None.

Multilingual models (Johnson et al., 2017): a vocabulary learned with `target_langs` holds one
user-defined piece per target language, `<2de>`, `<2fr>`, right after the reserved ids. A source
that starts with one (`tagged`: "<2fr> Jesus wept.") is encoded with that piece as its first id,
one token (`tokenize_source`; SentencePiece alone would put a "▁" piece before it).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Sequence

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.special_tokens import EOS_ID, PAD_ID, RESERVED_IDS, START_ID, UNK_ID

BYTE_FALLBACK_MIN_VOCAB = 1000  # the smallest vocabulary learned with byte fallback (256 of its pieces bytes)


class TokenizerError(ValueError):
    """A tokenizer that cannot be trained or loaded."""


def lang_token(lang: str) -> str:
    """The piece that asks a multilingual model for target language `lang`: "fr" -> "<2fr>"."""
    return f"<2{lang}>"


def tag(text: str, lang: str | None) -> str:
    """`text` with `lang`'s piece in front, "<2fr> Jesus wept."; an empty text, or no `lang`: as it is."""
    return f"{lang_token(lang)} {text}" if lang and text.strip() else text


_LANG_PIECE = re.compile(r"^<2([A-Za-z][A-Za-z0-9_-]*)>$")


def target_path(path: str) -> str:
    """Where the target side's model of a tokenizer saved at `path` goes: "tokenizer.target.model"."""
    root, ext = os.path.splitext(path)
    return f"{root}.target{ext}"


def _processor(model_proto: bytes) -> sentencepiece.SentencePieceProcessor:
    """A SentencePiece model that reserves our ids (`special_tokens`), or a TokenizerError."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    ids = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
    if ids != RESERVED_IDS:
        raise TokenizerError(f"tokenizer reserves ids (pad, start, eos, unk) = {ids}, expected {RESERVED_IDS}")
    return processor


def _sentencepiece(model_proto: bytes) -> tf_text.SentencepieceTokenizer:
    """tensorflow-text's SentencePiece op (byte pieces, offsets), made where it is called: its
    resource belongs to the graph that uses it (one made outside a tf.data function is "Resource
    ... does not exist" inside it), and eagerly it lives as long as the call."""
    return tf_text.SentencepieceTokenizer(model_proto)


def _pieces(processor: sentencepiece.SentencePieceProcessor) -> list[str]:
    """Every piece of a SentencePiece model, in id order."""
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


class SubwordTokenizer(tf.Module):
    """`tokenize(strings [N]) -> RaggedTensor int32 [N, (len)]`; `detokenize(ids [N, L]) -> strings [N]`;
    `model_proto` encodes sources, `target_proto` (None: `model_proto` too) targets."""

    def __init__(self, model_proto: bytes, target_proto: bytes | None = None):
        super().__init__(name="subword_tokenizer")
        processor = _processor(model_proto)
        self.model_proto = model_proto
        self.target_proto = target_proto
        self._processor = processor
        self.vocab_size = processor.get_piece_size()
        # Byte fallback (see the module docstring): the vocabulary holds the 256 byte pieces.
        self.byte_fallback = any(processor.IsByte(i) for i in range(self.vocab_size))
        self._tokenizer = tf_text.FastSentencepieceTokenizer(model_proto)
        self._target_tokenizer = self._tokenizer
        if target_proto is not None:
            if _pieces(_processor(target_proto)) != _pieces(processor):
                raise TokenizerError("the target side's SentencePiece model has other pieces than the source side's")
            self._target_tokenizer = tf_text.FastSentencepieceTokenizer(target_proto)
        pieces = (processor.id_to_piece(i) for i in range(len(RESERVED_IDS), self.vocab_size))
        # {language: id} of the target-language pieces, user-defined (always one piece), in id order
        self.lang_ids = {
            match[1]: processor.piece_to_id(match[0])
            for match in map(_LANG_PIECE.match, pieces)
            if match and processor.encode(match[0])[-1:] == [processor.piece_to_id(match[0])]
        }
        # What SentencePiece puts before a language's piece at a text's start: the dummy prefix's
        # "▁" ("<2fr> x" -> "▁", "<2fr>", "▁x"), which `tokenize_source` never gives the model.
        self._tag_prefix = processor.encode(lang_token(next(iter(self.lang_ids))))[:-1] if self.lang_ids else []

    def piece(self, token_id: int) -> str:
        """The string of one vocabulary entry ("▁the", "<2fr>", "<pad>")."""
        return self._processor.id_to_piece(token_id)

    @property
    def target_langs(self) -> tuple[str, ...]:
        """The target languages of a multilingual vocabulary (none: a model of one language pair)."""
        return tuple(self.lang_ids)

    def tagged(self, texts: Sequence[str], langs: str | Sequence[str]) -> list[str]:
        """Each non-empty text with its target language's piece in front ("<2fr> Jesus wept."); `langs`:
        one for all texts, or one per text. A language the vocabulary has no piece for is an error."""
        langs = [langs] * len(texts) if isinstance(langs, str) else list(langs)
        if len(langs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(langs)} target languages")
        if not self.lang_ids:
            raise ValueError("this model translates into one language (no <2xx> tokens): drop the target language")
        unknown = sorted({lang for lang in langs if lang not in self.lang_ids}, key=str)
        if unknown:
            raise ValueError(
                f"unknown target language {', '.join(map(repr, unknown))}: "
                f"this model translates into {', '.join(self.target_langs)}"
            )
        return [tag(text, lang) for text, lang in zip(texts, langs)]

    def has_tag(self, text: str) -> bool:
        """Whether `text` starts with a target language's piece (as `tagged` puts it there)."""
        return any(text.startswith(lang_token(lang)) for lang in self.lang_ids)

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        sample_sentences: int = 400_000,
        seed: int = 0,
        target_langs: Sequence[str] = (),
        byte_fallback: bool | None = None,
        user_symbols: Sequence[str] = (),
    ) -> SubwordTokenizer:
        """Learn a unigram vocabulary of at most `vocab_size` pieces from `texts` (source and target),
        with one user-defined piece per language of `target_langs` (`lang_token`; ids 4, 5, ...), and
        with `byte_fallback` (None: where `vocab_size` >= `BYTE_FALLBACK_MIN_VOCAB`; True below that
        is a TokenizerError) the 256 byte pieces (see the module docstring), and each of `user_symbols`
        as one piece wherever it occurs (a tag such as backtranslate's "<BT>").

        `texts` may stream a whole corpus: SentencePiece keeps a uniform random sample of
        `sample_sentences` of them (reservoir sampling, drawn with `seed`), so memory is bounded
        by the sample, not the corpus. An error raised by `texts` is raised as it is.
        """
        if byte_fallback is None:
            byte_fallback = vocab_size >= BYTE_FALLBACK_MIN_VOCAB
        elif byte_fallback and vocab_size < BYTE_FALLBACK_MIN_VOCAB:
            raise TokenizerError(
                f"byte fallback takes 256 pieces: it needs a vocab_size of {BYTE_FALLBACK_MIN_VOCAB} or more, "
                f"got {vocab_size}"
            )
        model = io.BytesIO()
        failures = []

        def guarded():
            try:
                yield from texts
            except Exception as error:  # SentencePiece would turn it into a RuntimeError
                failures.append(error)
                raise

        sentencepiece.set_random_generator_seed(seed)
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=guarded(),
                model_writer=model,
                vocab_size=vocab_size,
                model_type="unigram",
                character_coverage=0.9999,
                pad_id=PAD_ID,
                bos_id=START_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                hard_vocab_limit=False,  # a small corpus gets a smaller vocabulary, not an error
                byte_fallback=byte_fallback,
                user_defined_symbols=[lang_token(lang) for lang in target_langs] + list(user_symbols),
                input_sentence_size=sample_sentences,
                shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as error:
            if failures:
                raise failures[0] from None
            raise TokenizerError(f"could not learn a subword vocabulary: {error}") from None
        return cls(model.getvalue())

    @classmethod
    def load(cls, path: str) -> SubwordTokenizer:
        """The tokenizer saved at `path`, with its target side's model where `target_path(path)` is one."""
        paths = [path] + ([target_path(path)] if os.path.isfile(target_path(path)) else [])
        protos = []
        for each in paths:
            try:
                with open(each, "rb") as f:
                    protos.append(f.read())
            except OSError as error:
                raise TokenizerError(f"cannot read tokenizer {each}: {error.strerror}") from None
        try:
            return cls(*protos)
        except RuntimeError:
            raise TokenizerError(f"{' or '.join(paths)} is not a SentencePiece model") from None

    def save(self, path: str) -> dict[str, str]:
        """Write the source side's (or only) model to `path`, the target side's to `target_path(path)`
        (a tokenizer of one model removes a stale one there); returns {"tokenizer": path} and, for two
        models, "target_tokenizer"."""
        with open(path, "wb") as f:
            f.write(self.model_proto)
        if self.target_proto is not None:
            with open(target_path(path), "wb") as f:
                f.write(self.target_proto)
            return {"tokenizer": path, "target_tokenizer": target_path(path)}
        if os.path.isfile(target_path(path)):
            os.remove(target_path(path))
        return {"tokenizer": path}

    def tokenize(self, strings, alpha: float = 0.0):
        """strings [N] -> subword ids of the target side, RaggedTensor int32 [N, (len)], without start
        or EOS: the most probable segmentation, or with `alpha` > 0 one sampled with smoothing `alpha`
        (Kudo, 2018; SentencePiece's `nbest_size=-1`: from every segmentation), different at every call."""
        return self._encode(strings, alpha, target=True)

    def _proto(self, target: bool) -> bytes:
        return self.target_proto if target and self.target_proto is not None else self.model_proto

    def _encode(self, strings, alpha: float, target: bool, lite: bool = False):
        """`tokenize` with the target side's model (`target`) or the source side's; `lite`: by the
        fast tokenizer (TFLite kernels), which has no byte fallback."""
        if alpha <= 0 and (lite or not self.byte_fallback):
            tokenizer = self._target_tokenizer if target else self._tokenizer
            return tf.cast(tokenizer.tokenize(strings), tf.int32)
        if alpha <= 0:
            return tf.cast(_sentencepiece(self._proto(target)).tokenize(strings), tf.int32)
        # Made where it is called, as `_sentencepiece`.
        sampler = tf_text.SentencepieceTokenizer(self._proto(target), nbest_size=-1, alpha=alpha)
        return tf.cast(sampler.tokenize(strings), tf.int32)

    def source_offsets(self, strings):
        """strings [N] -> (ids [N, (n)] int32, starts [N, (n)] int64): the source side's segmentation
        (SentencePiece's op; the ids `tokenize_source` gives a text without a target-language piece)
        and the byte where each token starts in its string."""
        ids, starts, _ = _sentencepiece(self.model_proto).tokenize_with_offsets(strings)
        return tf.cast(ids, tf.int32), starts

    def tokenize_source(self, strings, alpha: float = 0.0):
        """strings [N] -> ragged [N, (len)] int32 as `tokenize` with the source side's model, except that
        a leading target-language piece ("<2fr> ", its space optional) becomes one id at the front.
        Regex ops (a vocabulary with such pieces): not in the TFLite text model."""
        if not self.lang_ids:
            return self._encode(strings, alpha, target=False)
        strings = tf.convert_to_tensor(strings, tf.string)  # [N]
        tags = "|".join(re.escape(lang_token(lang)) for lang in self.lang_ids)
        tagged = tf.strings.regex_full_match(strings, f"(?s)({tags}).*")  # [N]
        leading = tf.strings.regex_replace(strings, f"(?s)^({tags}).*$", r"\1")  # [N]: the piece, where tagged
        rest = tf.where(tagged, tf.strings.regex_replace(strings, f"^({tags}) ?", ""), strings)  # [N]
        tag_ids = tf.zeros_like(tagged, tf.int32)  # [N]
        for lang, piece_id in self.lang_ids.items():
            tag_ids = tf.where(tagged & (leading == lang_token(lang)), piece_id, tag_ids)
        tokens = self._encode(rest, alpha, target=False)  # [N, (len)]
        splits = tokens.row_splits.dtype
        column = tf.RaggedTensor.from_tensor(
            tag_ids[:, None], lengths=tf.cast(tagged, splits), row_splits_dtype=splits
        )  # [N, (0|1)]
        return tf.concat([column, tokens], axis=1)  # [N, (len)]

    def _is_lang_id(self, ids):
        """ids [B] -> [B] bool: a target language's piece (Equal and LogicalOr: TFLite builtins)."""
        found = tf.zeros_like(ids, tf.bool)
        for piece_id in self.lang_ids.values():
            found = found | (ids == piece_id)
        return found

    def _without_tag_prefix(self, dense, counts):
        """(dense [B, n], counts [B]) of the source side's encoding with the dummy prefix's pieces before a leading
        target-language piece dropped (`_tag_prefix`): `tokenize_source`'s ids without its regex ops."""
        k = len(self._tag_prefix)
        if not k:
            return dense, counts
        padded = tf.pad(dense, [[0, 0], [0, k + 1]], constant_values=PAD_ID)  # [B, n + k + 1]
        led = self._is_lang_id(padded[:, k])  # [B]
        for i, piece_id in enumerate(self._tag_prefix):
            led = led & (padded[:, i] == piece_id)
        shifted = padded[:, k : k + tf.shape(dense)[1]]  # [B, n]
        return tf.where(led[:, None], shifted, dense), counts - k * tf.cast(led, tf.int32)

    def detokenize(self, ids):
        """ids [N, L] int32 -> strings [N] by the target side's model: the tokens before the first EOS
        or pad; start and unknown ids are dropped, and the spaces they leave behind with them."""
        ids = tf.convert_to_tensor(ids, tf.int32)  # [N, L]
        running = tf.math.cumprod(tf.cast((ids != EOS_ID) & (ids != PAD_ID), tf.int32), axis=1)  # [N, L]
        tokens = tf.RaggedTensor.from_tensor(ids, lengths=tf.reduce_sum(running, axis=1))  # [N, (len)]
        tokens = tf.ragged.boolean_mask(tokens, (tokens != START_ID) & (tokens != UNK_ID))
        detokenizer = _sentencepiece(self._proto(True)) if self.byte_fallback else self._target_tokenizer
        text = detokenizer.detokenize(tokens)  # [N]
        return tf.strings.strip(tf.strings.regex_replace(text, "  +", " "))

    def source_ids(self, strings, max_length: int, lite: bool = False):
        """strings [B] -> (source_ids [B, S] int32, token_counts [B] int32): the encoder input, each
        string's first `max_length - 1` tokens (a leading target-language piece one of them,
        `tokenize_source`), then EOS, padded; and each string's token count before that cut (0:
        nothing to translate, also for a target-language piece alone). The one rule for every
        translation path. With `lite`, only ops with TFLite kernels besides the fast tokenizer's (no byte
        fallback: a character the pieces lack is the unknown id), so it runs inside a TFLite model:
        there a leading target-language piece must be followed by a space ("<2fr> Jesus wept.", as
        `tag` writes it) to give `tokenize_source`'s ids."""
        tokens = self._encode(strings, 0.0, target=False, lite=True) if lite else self.tokenize_source(strings)
        counts = tf.cast(tokens.row_lengths(), tf.int32)  # [B]
        dense = tokens.to_tensor(default_value=PAD_ID)  # [B, n]
        if self.lang_ids and lite:
            dense, counts = self._without_tag_prefix(dense, counts)
        if self.lang_ids:  # a language's piece alone is nothing to translate
            first = tf.pad(dense, [[0, 0], [0, 1]], constant_values=PAD_ID)[:, 0]  # [B]
            alone = (counts == 1) & self._is_lang_id(first)  # [B]
            counts = tf.where(alone, 0, counts)
        kept = tf.minimum(counts, max_length - 1)  # [B]
        dense = dense[:, : max_length - 1]  # [B, n]
        width = tf.reduce_max(tf.concat([kept, [0]], axis=0)) + 1
        dense = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense)[1]]], constant_values=PAD_ID)  # [B, n + 1]
        at_end = tf.one_hot(kept, width, on_value=True, off_value=False, dtype=tf.bool)  # [B, n + 1]
        return tf.where(at_end, EOS_ID, dense), counts
