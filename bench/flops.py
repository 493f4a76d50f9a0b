"""Model FLOPs of a training step: the count every benchmark's MFU divides (Kaplan et al., 2020,
6 x parameters x tokens, with attention added). No TensorFlow here, so that the GPU check
on JAX (`gpu_check_jax.py`) counts with the same function as the TensorFlow benchmarks."""

from __future__ import annotations

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
