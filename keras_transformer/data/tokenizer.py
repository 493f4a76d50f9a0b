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
unknown). Characters that the model never saw map to the unknown id; `detokenize` drops it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.special_tokens import EOS_ID, PAD_ID, RESERVED_IDS, START_ID, UNK_ID


class TokenizerError(ValueError):
    """A tokenizer that cannot be trained or loaded."""


class SubwordTokenizer(tf.Module):
    """`tokenize(strings [N]) -> RaggedTensor int32 [N, (len)]`; `detokenize(ids [N, L]) -> strings [N]`."""

    def __init__(self, model_proto: bytes):
        super().__init__(name="subword_tokenizer")
        processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        ids = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        if ids != RESERVED_IDS:
            raise TokenizerError(f"tokenizer reserves ids (pad, start, eos, unk) = {ids}, expected {RESERVED_IDS}")
        self.model_proto = model_proto
        self.vocab_size = processor.get_piece_size()
        self._tokenizer = tf_text.FastSentencepieceTokenizer(model_proto)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, sample_sentences: int = 400_000, seed: int = 0
    ) -> SubwordTokenizer:
        """Learn a unigram vocabulary of at most `vocab_size` pieces from `texts` (source and target).

        `texts` may stream a whole corpus: SentencePiece keeps a uniform random sample of
        `sample_sentences` of them (reservoir sampling, drawn with `seed`), so memory is bounded
        by the sample, not the corpus. An error raised by `texts` is raised as it is.
        """
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
        try:
            with open(path, "rb") as f:
                proto = f.read()
        except OSError as error:
            raise TokenizerError(f"cannot read tokenizer {path}: {error.strerror}") from None
        try:
            return cls(proto)
        except RuntimeError:
            raise TokenizerError(f"{path} is not a SentencePiece model") from None

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.model_proto)

    def tokenize(self, strings, alpha: float = 0.0):
        """strings [N] -> subword ids, RaggedTensor int32 [N, (len)], without start or EOS: the most
        probable segmentation, or with `alpha` > 0 one sampled with smoothing `alpha` (Kudo, 2018;
        SentencePiece's `nbest_size=-1`: from every segmentation), different at every call."""
        if alpha <= 0:
            return tf.cast(self._tokenizer.tokenize(strings), tf.int32)
        # Made where it is called: its SentencePiece resource belongs to the graph that uses it (a
        # tokenizer made outside a tf.data function is "Resource ... does not exist" inside it).
        sampler = tf_text.SentencepieceTokenizer(self.model_proto, nbest_size=-1, alpha=alpha)
        return tf.cast(sampler.tokenize(strings), tf.int32)

    def detokenize(self, ids):
        """ids [N, L] int32 -> strings [N]: the tokens before the first EOS or pad; start and
        unknown ids are dropped, and the spaces they leave behind with them."""
        ids = tf.convert_to_tensor(ids, tf.int32)  # [N, L]
        running = tf.math.cumprod(tf.cast((ids != EOS_ID) & (ids != PAD_ID), tf.int32), axis=1)  # [N, L]
        tokens = tf.RaggedTensor.from_tensor(ids, lengths=tf.reduce_sum(running, axis=1))  # [N, (len)]
        tokens = tf.ragged.boolean_mask(tokens, (tokens != START_ID) & (tokens != UNK_ID))
        text = self._tokenizer.detokenize(tokens)  # [N]
        return tf.strings.strip(tf.strings.regex_replace(text, "  +", " "))

    def source_ids(self, strings, max_length: int):
        """strings [B] -> (source_ids [B, S] int32, token_counts [B] int32): the encoder input, each
        string's first `max_length - 1` tokens, then EOS, padded; and each string's token count
        before that cut (0: nothing to translate). The one rule for every translation path.
        Only ops with TFLite kernels besides the tokenizer's, so it runs inside a TFLite model."""
        tokens = self.tokenize(strings)  # [B, (n)]
        counts = tf.cast(tokens.row_lengths(), tf.int32)  # [B]
        kept = tf.minimum(counts, max_length - 1)  # [B]
        dense = tokens.to_tensor(default_value=PAD_ID)[:, : max_length - 1]  # [B, n]
        width = tf.reduce_max(tf.concat([kept, [0]], axis=0)) + 1
        dense = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense)[1]]], constant_values=PAD_ID)  # [B, n + 1]
        at_end = tf.one_hot(kept, width, on_value=True, off_value=False, dtype=tf.bool)  # [B, n + 1]
        return tf.where(at_end, EOS_ID, dense), counts
