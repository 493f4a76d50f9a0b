"""Multi-head scaled dot-product attention (Vaswani et al., 2017, §3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                          (Eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The h per-head projections are one matrix each (W^Q: d_model x h*d_k), and W^K and W^V are
fused into one d_model x 2*h*d_k matrix: the same arithmetic as the paper in fewer, larger
matmuls. Keys and values can be projected once and reused (`project_key_value` + `attend`),
which is what the decoder's key/value cache does.

A decoding step (one query position per row) computes Q K^T and the weights x V as broadcast
batched matmuls over a [B, g, h, 1, d_k] view of the queries, which needs no transpose
(`batch_matmul`); longer queries use einsums.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.linear import Linear, leading_shape
from keras_transformer.layers.masking import masked_fill_value


def batch_matmul(x, y, transpose_y: bool = False):
    """x @ y (y^T with `transpose_y`) over broadcast batch dimensions.

    On TensorFlow this is `BatchMatMulV3`, which TensorFlow's oneDNN graph rewrite leaves to its
    own (Eigen) kernel. The rewrite turns `tf.matmul`'s BatchMatMulV2 and `Einsum` into oneDNN
    matmuls, each a primitive made for one shape, and a beam search's attention changes shape at
    every step (the cache grows, sentences leave the batch). Over the held-out verses, with the
    einsums, oneDNN's primitive cache missed 2,102 times in a pass whose every shape it had seen
    in the pass before (414 ms making matmul primitives), and the search took 1.19x as long, on
    one thread, as with this kernel (bench/JOURNAL.md, "2026-12-02 (morning)")."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.raw_ops.BatchMatMulV3(x=x, y=y, adj_x=False, adj_y=transpose_y, Tout=x.dtype)
    return ops.matmul(x, ops.swapaxes(y, -1, -2) if transpose_y else y)


def softmax_by_parts(x):
    """softmax(x) over the last axis as exp(x - max) / sum: a decoding step's attention weights.
    TensorFlow runs `ops.softmax` as a oneDNN primitive made per shape, as it runs einsums
    (`batch_matmul`): with the matmuls as `BatchMatMulV3`, the softmax's primitives still missed
    oneDNN's cache 1,009 times per pass over the held-out verses. Max, exp, sum and divide run
    TensorFlow's own kernels."""
    e = ops.exp(x - ops.max(x, axis=-1, keepdims=True))
    return e / ops.sum(e, axis=-1, keepdims=True)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """h heads of scaled dot-product attention, d_k = d_v = d_model / h (§3.2.2).

    Call: `layer(query, memory, attention_mask=None)` with `query` [B, T, d_model], `memory`
    [B, S, d_model] (the same tensor for self-attention) and a boolean `attention_mask`
    broadcastable to [B, T, S], True where a query may attend to a key. Returns [B, T, d_model],
    or `(output, weights)` with weights [B, h, T, S] when `return_attention_scores=True`.
    """

    def __init__(self, num_heads: int, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads

    def build(self, query_shape, memory_shape=None):
        d_model = query_shape[-1]
        if d_model is None or d_model % self.num_heads:
            raise ValueError(
                f"MultiHeadAttention: the last input dimension ({d_model}) must be known and divisible "
                f"by num_heads ({self.num_heads})"
            )
        memory_shape = query_shape if memory_shape is None else memory_shape
        if memory_shape[-1] != d_model:
            raise ValueError(f"MultiHeadAttention: memory width {memory_shape[-1]} != query width {d_model}")
        self.d_model = d_model
        self.d_k = d_model // self.num_heads
        self.query_dense = Linear(d_model, name="query", dtype=self.dtype_policy)  # W^Q
        self.key_value_dense = Linear(2 * d_model, name="key_value", dtype=self.dtype_policy)  # W^K|W^V
        self.output_dense = Linear(d_model, name="output", dtype=self.dtype_policy)  # W^O
        self.query_dense.build(query_shape)
        self.key_value_dense.build(memory_shape)
        self.output_dense.build(query_shape)

    def _split_heads(self, x):
        x = ops.reshape(x, (*leading_shape(x), self.num_heads, self.d_k))  # [B, L, h, d_k]
        return ops.transpose(x, (0, 2, 1, 3))  # [B, h, L, d_k]

    def project_key_value(self, memory):
        """K W^K and V W^V for every head: two tensors [B, h, S, d_k] (head-major, so that the
        attention reads them, or a decoding cache of them, without transposing)."""
        key_value = self.key_value_dense(memory)  # [B, S, 2 * d_model]
        key, value = ops.split(key_value, 2, axis=-1)  # 2 x [B, S, d_model]
        return self._split_heads(key), self._split_heads(value)

    def attend(self, query, key, value, attention_mask=None, return_attention_scores=False):
        """Eq. 1 for every head, given projected `key` and `value` [B, h, S, d_k].

        The query's batch B' may be a multiple g of B: memory row b then serves query rows
        b*g .. b*g+g-1 (the beams of one sentence), which attend side by side as g*T queries of
        one row, so the memory is never copied per beam. `attention_mask` broadcasts to
        [B, T, S] (to [B, 1, S] when g > 1); the weights are [B, h, g*T, S].
        """
        memory_batch, heads = ops.shape(key)[0], self.num_heads
        step = query.shape[1] == 1  # one position per row: a decoding step
        q = self.query_dense(query) * ops.cast(1.0 / self.d_k**0.5, query.dtype)  # [B', T, d_model]
        if step:  # the beams' queries of each memory row, as a view: no transpose
            q = ops.reshape(q, (memory_batch, -1, heads, 1, self.d_k))  # [B, g, h, 1, d_k]
            scores = batch_matmul(q, ops.expand_dims(key, 1), transpose_y=True)  # [B, g, h, 1, S]
        else:
            q = ops.reshape(q, (memory_batch, -1, heads, self.d_k))  # [B, g*T, h, d_k]
            scores = ops.einsum("bthd,bhsd->bhts", q, key)  # [B, h, g*T, S]
        # The softmax runs in float32 so that mixed precision changes no masked probability.
        scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")  # [B, T|1, S]
            mask = ops.expand_dims(mask, (1, 2) if step else 1)  # [B, 1, 1, 1, S] | [B, 1, T|1, S]
            scores = ops.where(mask, scores, masked_fill_value("float32"))
        if step:
            weights = softmax_by_parts(scores)  # [B, g, h, 1, S]
            context = batch_matmul(ops.cast(weights, value.dtype), ops.expand_dims(value, 1))  # [B, g, h, 1, d_k]
        else:
            weights = ops.softmax(scores, axis=-1)  # [B, h, g*T, S]
            context = ops.einsum("bhts,bhsd->bthd", ops.cast(weights, value.dtype), value)  # [B, g*T, h, d_k]
        output = self.output_dense(ops.reshape(context, (*leading_shape(query), self.d_model)))  # [B', T, d_model]
        if not return_attention_scores:
            return output
        if step:
            weights = ops.transpose(ops.reshape(weights, (memory_batch, -1, heads, ops.shape(key)[2])), (0, 2, 1, 3))
        return output, weights  # [B, h, g*T, S]

    def init_cache(self, batch_size, length):
        """An empty self-attention cache for `batch_size` rows: {"key", "value"}
        [batch_size, h, length, d_k], `length` fixed slots, or 0 for a cache that grows."""
        shape = (batch_size, self.num_heads, length, self.d_k)
        return {"key": ops.zeros(shape, self.compute_dtype), "value": ops.zeros(shape, self.compute_dtype)}

    def call(self, query, memory, attention_mask=None, cache=None, position=None, return_attention_scores=False):
        """`memory` is [B, S, d_model] (the query itself for self-attention), or the pair that
        `project_key_value(memory)` returned, for a memory attended at every decoding step.

        With `cache` (`init_cache`; incremental self-attention, one position [B, 1, d_model] per
        call): the key and value of `memory` enter the cache, the query attends to them and to
        every earlier position, and the result is `(output, updated cache)`. A growing cache
        (`position` None) appends them: one copy, and no masked slot to read. A fixed-size cache
        (static shapes, for XLA) writes them at `position` and masks the later slots.
        """
        key, value = memory if isinstance(memory, (tuple, list)) else self.project_key_value(memory)
        if cache is None:
            return self.attend(query, key, value, attention_mask, return_attention_scores)
        if position is None:
            key = ops.concatenate([cache["key"], key], axis=2)  # [B, h, position + 1, d_k]
            value = ops.concatenate([cache["value"], value], axis=2)
            return self.attend(query, key, value), {"key": key, "value": value}
        start = (0, 0, position, 0)
        key = ops.slice_update(cache["key"], start, key)  # [B, h, L, d_k]
        value = ops.slice_update(cache["value"], start, value)
        visible = ops.reshape(ops.arange(ops.shape(key)[2]) <= position, (1, 1, -1))  # [1, 1, L]
        return self.attend(query, key, value, attention_mask=visible), {"key": key, "value": value}

    def compute_output_shape(self, query_shape, memory_shape=None):
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads}
