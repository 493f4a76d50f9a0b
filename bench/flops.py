"""Model FLOPs of a training step: the count every benchmark's MFU divides (Kaplan et al., 2020,
6 x parameters x tokens, with attention added), the FLOPs of one decoding step, and the measured
matmul rate they are divided by. No TensorFlow here, so that the GPU check on JAX
(`gpu_check_jax.py`) counts and measures with the same functions as the TensorFlow benchmarks."""

from __future__ import annotations

import time

from keras_transformer.config import TransformerConfig

FLOPS_FORMULA = (
    "6 * (P_enc * B*S + P_dec * B*T + V*d_model * B*T) + 12 * N * B * d_model * (S*S + T*T + T*S); "
    "P_enc = N*(4*d_model^2 + 2*d_model*d_ff), P_dec = N*(8*d_model^2 + 2*d_model*d_ff) are the weight "
    "matrices (biases, norms and the embedding lookup excluded; the tied output projection V*d_model "
    "included); the second term is Q K^T and weights V of every attention layer, forward + backward "
    "(the causal half is counted: it is computed)"
)


def model_flops_per_step(config: TransformerConfig, batch: int, source_length: int, target_length: int) -> float:
    """Training FLOPs of one step (forward + backward = 3 x forward, 2 FLOPs per multiply-add); see FLOPS_FORMULA."""
    d, d_ff, n = config.d_model, config.d_ff, config.num_layers
    encoder = n * (4 * d * d + 2 * d * d_ff)  # W^Q, W^K, W^V, W^O; W_1, W_2
    decoder = n * (8 * d * d + 2 * d * d_ff)  # self- and cross-attention; W_1, W_2
    source_tokens, target_tokens = batch * source_length, batch * target_length
    weights = 6 * (encoder * source_tokens + (decoder + config.vocab_size * d) * target_tokens)
    attention = 12 * n * batch * d * (source_length**2 + target_length**2 + target_length * source_length)
    return float(weights + attention)


def matmul_rate(n: int, dtype: str = "float32", calls: int = 10, trials: int = 3) -> float:
    """The best measured FLOP/s of n x n matmuls in `dtype` on Keras' default device, through its
    backend's own kernels and thread pools (TensorFlow's or JAX's): the MFU denominator. Eager
    calls, one product each (nothing to fold); a trial times `calls` of them and waits for the
    last (they run in order on a device); one untimed trial first."""
    import keras

    a = keras.random.normal((n, n), dtype=dtype, seed=0)
    b = keras.random.normal((n, n), dtype=dtype, seed=1)

    def trial() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            out = keras.ops.matmul(a, b)
        keras.ops.convert_to_numpy(keras.ops.cast(out[0, 0], "float32"))  # waits for the device
        return time.perf_counter() - start

    trial()
    return 2 * n**3 * calls / min(trial() for _ in range(trials))


def decode_step_flops(config: TransformerConfig, rows: int, source_length: int, position: float) -> float:
    """Forward FLOPs of one cached decoding step for `rows` hypotheses (batch x beam) at target
    `position` (the self-attention reads `position` keys): the decoder's weight matrices per new
    token (W^Q, W^K, W^V, W^O of self-attention, W^Q, W^O of cross-attention, whose keys and values
    of the memory are computed once; W_1, W_2), the tied output projection V x d_model, and the
    attention scores and weighted values over `position` and `source_length` keys; 2 FLOPs per
    multiply-add. Norms, softmax, top-k and the beam bookkeeping are not counted."""
    d, d_ff, n = config.d_model, config.d_ff, config.num_layers
    weights = n * (6 * d * d + 2 * d * d_ff) + config.vocab_size * d
    attention = n * 2 * d * (position + source_length)  # Q K^T and weights x V, self and cross
    return float(2 * rows * (weights + attention))
