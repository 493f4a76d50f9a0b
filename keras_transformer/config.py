"""Configuration: model presets (Vaswani et al., 2017, Table 3), data, training and decoding settings.

One frozen dataclass per concern. A preset names a model and the training settings that go
with it, both in `PRESETS`; `TransformerConfig.preset` and `TrainingConfig.preset` apply
overrides to them, so every preset is validated by `__post_init__`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer.special_tokens import EOS_ID, PAD_ID, RESERVED_IDS, START_ID

# Names the command line offers before it imports TensorFlow (data.py and distribute.py use them).
BIBLE_EN_DE = "bible-en-de"  # the embedded corpus
STRATEGIES = ("auto", "one-device", "mirrored", "multi-worker", "tpu")  # tf.distribute strategies


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named model and the training settings that go with it: the `TransformerConfig` and
    `TrainingConfig` fields that differ from their defaults (the paper's base model, §3, and
    training, §5)."""

    model: dict[str, Any]
    training: dict[str, Any]


PRESETS = {
    # For tests and smoke runs (not in the paper).
    "tiny": Preset(
        model=dict(vocab_size=1000, num_layers=2, d_model=64, d_ff=128, num_heads=4, max_length=128),
        training={},
    ),
    # The CPU recipe (not in the paper), chosen by measurement for budgets of minutes on two CPU
    # cores (bench/RESULTS.md, "Quality on a CPU budget"; bench/quality.py). Pre-LN leaves the
    # early plateau that post-LN sits on for hundreds of steps, and within a few epochs dropout
    # only slows learning (pass dropout 0.1 for long runs). Small token batches buy many updates
    # in few minutes; Eq. 3 is fitted to the step budget (StepBudgetSchedule) with its peak at 2x
    # the paper's (this pre-LN model trains well at 2-4x; at 8x it stalls).
    "small": Preset(
        model=dict(num_layers=3, d_model=128, d_ff=512, num_heads=4, dropout=0.0, norm_first=True),
        training=dict(
            batch_tokens=1024, learning_rate_scale=2.0, warmup_fraction=0.1, cooldown_fraction=0.2, steps_per_epoch=200
        ),
    ),
    # Transformer (base model), Table 3: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; Eq. 3 with warmup_steps 4000.
    "base": Preset(model={}, training={}),
    # Transformer (big), Table 3: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3.
    "big": Preset(model=dict(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3), training={}),
}


def preset(name: str) -> Preset:
    """The preset called `name` (one of `PRESETS`)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the model (§3, Table 3), in the paper's names.

    Source and target share one subword vocabulary and one embedding matrix (§3.4), so
    `vocab_size` is the size of that joint vocabulary. Reserved ids (`special_tokens`, the only
    ones the tokenizer accepts): `pad_id` pads batches, `start_id` starts every decoder input,
    `eos_id` ends every sequence.
    """

    vocab_size: int = 8000  # subword vocabulary size, source and target shared (§3.4)
    num_layers: int = 6  # N, identical layers in each of the encoder and the decoder
    d_model: int = 512  # d_model, width of every sub-layer output
    d_ff: int = 2048  # d_ff, inner width of the position-wise feed-forward network
    num_heads: int = 8  # h, parallel attention heads; d_k = d_v = d_model / h
    dropout: float = 0.1  # P_drop, residual and embedding dropout (§5.4)
    label_smoothing: float = 0.1  # epsilon_ls (§5.4)
    max_length: int = 256  # longest sequence, in subword tokens including start/EOS
    pad_id: int = PAD_ID  # reserved ids: the tokenizer's own (special_tokens.py)
    start_id: int = START_ID  # reserved
    eos_id: int = EOS_ID  # reserved
    layer_norm_epsilon: float = 1e-6  # added to the variance in every LayerNorm
    norm_first: bool = False  # False: the paper's LayerNorm(x + Sublayer(x)); True: x + Sublayer(LayerNorm(x))

    def __post_init__(self):
        _check(
            self.vocab_size > len(RESERVED_IDS),
            f"vocab_size must exceed the {len(RESERVED_IDS)} reserved ids (pad, start, EOS, unknown), "
            f"got {self.vocab_size}",
        )
        _check(self.num_layers >= 1, f"num_layers must be >= 1, got {self.num_layers}")
        _check(self.d_model >= 2 and self.d_model % 2 == 0, f"d_model must be even and >= 2, got {self.d_model}")
        _check(self.d_ff >= 1, f"d_ff must be >= 1, got {self.d_ff}")
        _check(self.num_heads >= 1, f"num_heads must be >= 1, got {self.num_heads}")
        _check(
            self.d_model % self.num_heads == 0,
            f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})",
        )
        _check(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        _check(0.0 <= self.label_smoothing < 1.0, f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        _check(self.max_length >= 2, f"max_length must be >= 2, got {self.max_length}")
        reserved = (self.pad_id, self.start_id, self.eos_id)
        _check(
            reserved == (PAD_ID, START_ID, EOS_ID),
            f"(pad_id, start_id, eos_id) must be the tokenizer's reserved ids {(PAD_ID, START_ID, EOS_ID)}, "
            f"got {reserved}",
        )

    @property
    def d_k(self) -> int:
        """d_k = d_v = d_model / h (§3.2.2)."""
        return self.d_model // self.num_heads

    @classmethod
    def base(cls, **overrides: Any) -> TransformerConfig:
        """Transformer (base model), Table 3."""
        return cls.preset("base", **overrides)

    @classmethod
    def big(cls, **overrides: Any) -> TransformerConfig:
        """Transformer (big), Table 3."""
        return cls.preset("big", **overrides)

    @classmethod
    def small(cls, **overrides: Any) -> TransformerConfig:
        """The CPU recipe's model (not in the paper)."""
        return cls.preset("small", **overrides)

    @classmethod
    def tiny(cls, **overrides: Any) -> TransformerConfig:
        """A model for tests and smoke runs (not in the paper)."""
        return cls.preset("tiny", **overrides)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """The model of preset `name` (one of `PRESETS`), with `overrides`."""
        return cls(**{**preset(name).model, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {', '.join(unknown)}")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from, how it is split and sampled, and which pairs are skipped
    (`keras_transformer.data`; the README's "Data"). Field names are the `train` flags' names."""

    data: str = BIBLE_EN_DE  # training pairs: bible-en-de, TSV path(s) (a glob, or comma-separated), or tfds:NAME
    valid_data: str | None = None  # validation pairs (a file, used whole, or tfds:NAME's validation split)
    test_data: str | None = None  # test pairs for `evaluate` (a file, used whole, or tfds:NAME's test split)
    reverse: bool = False  # swap source and target
    valid_pairs: int = 3000  # validation pairs scored at every epoch end, at most
    tokenizer_sample: int = 50_000  # pairs drawn uniformly from the training split to learn the vocabulary from
    tokenizer_model: str | None = None  # an existing SentencePiece model to use instead of learning one
    max_length_ratio: float = 9.0  # skip training pairs whose longer side has more than this many times the tokens
    tfds_data_dir: str | None = None  # TFDS data directory (default: $TFDS_DATA_DIR, else ~/tensorflow_datasets)
    tfds_download: bool = False  # download and prepare a tfds:NAME not prepared there (default: fail at once)

    def __post_init__(self):
        _check(bool(self.data), "data must name a data source")
        _check(self.valid_pairs >= 1, f"valid_pairs must be >= 1, got {self.valid_pairs}")
        _check(self.tokenizer_sample >= 1, f"tokenizer_sample must be >= 1, got {self.tokenizer_sample}")
        _check(self.max_length_ratio >= 1.0, f"max_length_ratio must be >= 1, got {self.max_length_ratio}")


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation settings (§5.2-5.3) and the batching of the data pipeline."""

    warmup_steps: int = 4000  # warmup_steps of Eq. 3
    learning_rate_scale: float = 1.0  # multiplies Eq. 3 (1.0 is the paper's)
    beta_1: float = 0.9  # Adam (§5.3)
    beta_2: float = 0.98  # Adam (§5.3)
    epsilon: float = 1e-9  # Adam (§5.3)
    batch_tokens: int = 4096  # padded tokens per side (source or target) in a batch, at most (§5.1: ~25000)
    max_steps: int = 100_000  # optimizer steps to train, counted across restarts (the paper's base: 100k)
    steps_per_epoch: int = 500  # checkpoint, validation and log interval, in steps
    checkpoint_every: int = 0  # also checkpoint every this many steps (0: only at epoch ends)
    keep_checkpoints: int = 5  # training checkpoints kept, the newest
    grad_accumulation: int = 1  # micro-batches per optimizer step: the update uses their mean gradient
    mixed_precision: bool = False  # mixed_float16 on GPU, mixed_bfloat16 on CPU and TPU
    jit_compile: bool = False  # compile the training step with XLA
    shuffle_buffer: int = 20_000  # sentence pairs in the shuffle buffer
    seed: int = 1234  # weights, shuffling and dropout
    time_budget_s: float | None = None  # stop after this much wall-clock time (and fit the schedule to it)
    warmup_fraction: float | None = None  # warm-up as a fraction of the step budget, instead of warmup_steps
    cooldown_fraction: float = 0.2  # with warmup_fraction: linear decay to 0 over this last fraction
    bleu_every_epochs: int = 0  # validation BLEU every this many epochs, best weights kept in best/ (0: off)
    bleu_sentences: int = 100  # validation sentences translated for that BLEU

    def __post_init__(self):
        _check(self.bleu_every_epochs >= 0, f"bleu_every_epochs must be >= 0, got {self.bleu_every_epochs}")
        _check(self.bleu_sentences >= 1, f"bleu_sentences must be >= 1, got {self.bleu_sentences}")
        _check(self.warmup_steps >= 1, f"warmup_steps must be >= 1, got {self.warmup_steps}")
        _check(self.learning_rate_scale > 0, f"learning_rate_scale must be > 0, got {self.learning_rate_scale}")
        _check(self.batch_tokens >= 8, f"batch_tokens must be >= 8, got {self.batch_tokens}")
        _check(self.max_steps >= 1, f"max_steps must be >= 1, got {self.max_steps}")
        _check(self.steps_per_epoch >= 1, f"steps_per_epoch must be >= 1, got {self.steps_per_epoch}")
        _check(self.checkpoint_every >= 0, f"checkpoint_every must be >= 0, got {self.checkpoint_every}")
        _check(self.grad_accumulation >= 1, f"grad_accumulation must be >= 1, got {self.grad_accumulation}")
        _check(self.keep_checkpoints >= 1, f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        _check(
            self.time_budget_s is None or self.time_budget_s > 0, f"time_budget_s must be > 0, got {self.time_budget_s}"
        )
        _check(
            self.warmup_fraction is None or 0.0 < self.warmup_fraction < 1.0,
            f"warmup_fraction must be in (0, 1), got {self.warmup_fraction}",
        )
        _check(
            0.0 <= self.cooldown_fraction < 1.0, f"cooldown_fraction must be in [0, 1), got {self.cooldown_fraction}"
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TrainingConfig:
        """The training settings of preset `name` (one of `PRESETS`), with `overrides`."""
        return cls(**{**preset(name).training, **overrides})

    @property
    def fits_schedule_to_budget(self) -> bool:
        """Warm-up and decay as fractions of the step budget (max_steps, or what the time budget buys)."""
        return self.warmup_fraction is not None
