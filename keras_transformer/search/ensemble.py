"""Ensemble decoding: several models that share a vocabulary search as one.

    import keras_transformer as kt

    translator = kt.Translator.from_model_dir(["runs/a", "runs/b"])   # or:
    ensemble, tokenizer = kt.Ensemble.from_model_dirs(["runs/a", "runs/b"])
    kt.Translator(ensemble, tokenizer).translate("Jesus wept.")

`Ensemble` has the decoding protocol (`search.DecodingModel`: `config`, `start_decoding`,
`decode_step`, `cross_attention`), so every search, alignment, `Translator`, `evaluate` and the exporters
take it where they take a `Transformer`; the search never knows. Each step it returns the log
of the mean of the models' next-token distributions (probability averaging, as OpenNMT-py and
fairseq ensemble: log (1/M) sum_m softmax(logits_m)), not the mean of their log-probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

from keras_transformer.model import DecodingContext


class Ensemble:
    """M models decoding as one: `decode_step` gives log((1/M) sum_m p_m(y | x, y_<t)) [B', V].

    The context's rows and shared entries and the cache are tuples of each model's (the search
    reorders every cache leaf by hypothesis, whatever the nesting). The models may differ in architecture (layers,
    widths, heads) but must agree on `vocab_size` and `max_length`: one vocabulary, one input
    limit. `config` is the first model's, which is all a search reads of it (`vocab_size`,
    `max_length`).
    """

    def __init__(self, models: Sequence):
        self.models = tuple(models)
        if not self.models:
            raise ValueError("an ensemble needs at least one model")
        first = self.models[0].config
        for field in ("vocab_size", "max_length"):
            values = [getattr(model.config, field) for model in self.models]
            if len(set(values)) > 1:
                raise ValueError(f"the models of an ensemble must agree on {field}, got {', '.join(map(str, values))}")
        self.config = first

    @classmethod
    def from_model_dirs(cls, paths: Sequence[str], checkpoint: str = "latest", dtype: str | None = None):
        """(Ensemble, the shared SubwordTokenizer) of the model directories `paths`, each with the
        weights of `checkpoint` ("latest", "averaged", "best"). Models whose tokenizers differ (the
        serialized SentencePiece models are compared) are refused: their ids mean other pieces."""
        from keras_transformer.model_dir import load_model

        models, tokenizer = [], None
        for path in paths:
            model, path_tokenizer, _ = load_model(path, checkpoint, dtype)
            protos = (path_tokenizer.model_proto, path_tokenizer.target_proto)
            if tokenizer is not None and protos != (tokenizer.model_proto, tokenizer.target_proto):
                raise ValueError(
                    f"{path} has another tokenizer than {paths[0]}: an ensemble's models must share one "
                    f"(train with --tokenizer-model {paths[0]}/tokenizer.model)"
                )
            models.append(model)
            if tokenizer is None:
                tokenizer = path_tokenizer
        return cls(models), tokenizer

    @property
    def built(self) -> bool:
        return all(model.built for model in self.models)

    def build(self) -> None:
        for model in self.models:
            if not model.built:
                model.build()

    @property
    def variables(self) -> list:
        """Every model's variables (what an exported module must hold)."""
        return [variable for model in self.models for variable in model.variables]

    def with_dtype(self, dtype: str) -> Ensemble:
        """The ensemble of the models in `dtype` (`Transformer.with_dtype`)."""
        return Ensemble([model.with_dtype(dtype) for model in self.models])

    def with_int8(self) -> Ensemble:
        """The ensemble of the models with int8 weights (`Transformer.with_int8`)."""
        return Ensemble([model.with_int8() for model in self.models])

    def start_decoding(self, source_ids, hypotheses: int, max_length=None, vocabulary=None):
        """`Transformer.start_decoding` of every model (over the same `vocabulary`, if given): (one
        `DecodingContext` of every model's rows and shared entries, the tuple of their caches)."""
        started = [model.start_decoding(source_ids, hypotheses, max_length, vocabulary) for model in self.models]
        contexts = [context for context, _ in started]
        context = DecodingContext(
            rows=tuple(c.rows for c in contexts),
            shared=tuple(c.shared for c in contexts),
            fixed_cache=max_length is not None,
        )
        return context, tuple(cache for _, cache in started)

    def cross_attention(self, source_ids, target_in_ids, layer: int):
        """The mean of the models' `cross_attention` [B, T, S], each at its own `layer`."""
        weights = [model.cross_attention(source_ids, target_in_ids, layer) for model in self.models]
        return tf.add_n(weights) / len(weights)

    @property
    def dtype_policy(self):
        """The first model's (the models decode in one dtype: `with_dtype`)."""
        return self.models[0].dtype_policy

    def __call__(self, inputs, training=False):
        """(source_ids [B, S], target_in_ids [B, T]) -> log of the mean next-token probability
        [B, T, V] float32 at every target position: the teacher-forced pass of `decode_step`
        (what scoring reads; its log-softmax leaves these as they are)."""
        log_probs = [tf.nn.log_softmax(tf.cast(model(inputs, training=training), tf.float32)) for model in self.models]
        return tf.reduce_logsumexp(tf.stack(log_probs), axis=0) - math.log(len(self.models))  # [B, T, V]

    def decode_step(self, token_ids, position, cache, context):
        """token_ids [B'] at `position` -> (log of the mean next-token probability [B', V] float32,
        the updated caches). These are normalized log-probabilities, so the search's log-softmax
        leaves them as they are."""
        log_probs, caches = [], []
        members = zip(self.models, cache, context.rows, context.shared)
        for model, model_cache, rows, shared in members:
            model_context = DecodingContext(rows, shared, context.fixed_cache)
            logits, model_cache = model.decode_step(token_ids, position, model_cache, model_context)  # [B', V]
            log_probs.append(tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1))
            caches.append(model_cache)
        # log (1/M) sum_m p_m = logsumexp_m(log p_m) - log M, stable where some p_m underflow.
        mean = tf.reduce_logsumexp(tf.stack(log_probs), axis=0) - math.log(len(self.models))  # [B', V]
        return mean, tuple(caches)
