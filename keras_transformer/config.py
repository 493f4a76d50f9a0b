"""Configuration: model presets (Vaswani et al., 2017, Table 3), data, training and decoding settings.

One frozen dataclass per concern, each the one owner of its settings and their checks
(`__post_init__`): `TransformerConfig` (the architecture), `TrainingConfig` (§5), `DataConfig`
(where the text comes from) and `DecodingConfig` (§6.1). A preset names a model and the training
settings that go with it, both in `PRESETS`; `TransformerConfig.preset` and
`TrainingConfig.preset` apply overrides to them. The command line's flags are made from these
fields (`cli/flags.py`), each with its help in its metadata (`setting`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from keras_transformer.special_tokens import EOS_ID, PAD_ID, RESERVED_IDS, START_ID

# Names the command line offers before it imports TensorFlow (data.py and distribute.py use them).
BIBLE_EN_DE = "bible-en-de"  # the embedded corpora
BIBLE_EN_FR = "bible-en-fr"
SOFTWARE_EN_DE = "software-en-de"
EMBEDDED = (BIBLE_EN_DE, BIBLE_EN_FR, SOFTWARE_EN_DE)
# A fine-tuned model's vocabulary (`TrainingConfig.vocabulary`): keep the parent's, or update: learn
# one from the new data, with the parent's embedding rows for the pieces both have.
VOCABULARIES = ("keep", "update")
STRATEGIES = ("auto", "one-device", "mirrored", "multi-worker", "tpu")  # tf.distribute strategies


@dataclasses.dataclass(frozen=True)
class BudgetFit:
    """What a preset changes for a wall-clock budget of at least `min_budget_s` seconds: settings
    measured to win there, by the CPU unit that runs TensorFlow's bfloat16 (`keras_transformer.cpu.
    tensorflow_bfloat16_unit`)."""

    min_budget_s: float
    model: dict[str, Any]
    training: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named model and the training settings that go with it: the `TransformerConfig` and
    `TrainingConfig` fields that differ from their defaults (the paper's base model, §3, and
    training, §5); `budget_fits`: what changes for long budgets, by the CPU flag of the unit that
    runs bfloat16, None where none does (`budget_fit`)."""

    model: dict[str, Any]
    training: dict[str, Any]
    budget_fits: dict[str | None, BudgetFit] = dataclasses.field(default_factory=dict)

    def budget_fit(self, time_budget_s: float | None, bfloat16_unit: str | None) -> BudgetFit | None:
        """What changes for a run of `time_budget_s` seconds (None: no wall-clock budget) where
        TensorFlow runs bfloat16 on `bfloat16_unit` (a CPU flag; None: on none); None: nothing."""
        fit = self.budget_fits.get(bfloat16_unit)
        if fit is None or time_budget_s is None or time_budget_s < fit.min_budget_s:
            return None
        return fit

    def with_fit(self, fit: BudgetFit | None) -> Preset:
        """These settings with `fit`'s changes (`budget_fit`; None: none)."""
        if fit is None:
            return self
        return Preset({**self.model, **fit.model}, {**self.training, **fit.training})


# `small` from 30 minutes (the comment on `small`): dropout 0.1 where the budget buys 9,000 steps or
# more; where TensorFlow runs bfloat16 on a CPU unit, twice the width in bfloat16 too.
SMALL_LONG = BudgetFit(min_budget_s=30 * 60, model=dict(dropout=0.1), training=dict(dropout_from_steps=9_000))
SMALL_WIDE = BudgetFit(
    min_budget_s=SMALL_LONG.min_budget_s,
    model={**SMALL_LONG.model, "d_model": 256, "d_ff": 1024},
    training={**SMALL_LONG.training, "mixed_precision": True},
)

PRESETS = {
    # For tests and smoke runs (not in the paper).
    "tiny": Preset(
        model=dict(vocab_size=1000, num_layers=2, d_model=64, d_ff=128, num_heads=4, max_length=128),
        training={},
    ),
    # The CPU recipe (not in the paper), chosen by measurement for budgets of minutes on two CPU
    # cores (bench/RESULTS.md, "Quality on a CPU budget"; `bench/quality.py table`; the search:
    # bench/JOURNAL.md, "How the recipe was chosen"). Pre-LN leaves the early plateau that post-LN
    # sits on for hundreds of steps, and within a few epochs dropout only slows learning. Small token
    # batches buy many updates in few minutes; Eq. 3 is fitted to the step budget (StepBudgetSchedule)
    # with its peak at 2x the paper's (this pre-LN model trains well at 2-4x; at 8x it stalls).
    # From 30 minutes, dropout 0.1 (§5.4) where the budget buys 9,000 steps or more
    # (`TrainingConfig.dropout_from_steps`, estimated after the first steps): at ~6,200 steps it cost
    # 1.66 BLEU, at ~13,000 it gained 1.19 (the narrow model under the AVX2 caps;
    # bench/RESULTS.md, "The 30-minute recipe re-fitted: dropout by the steps a budget buys").
    # Where TensorFlow runs bfloat16 on a CPU unit, twice the width (heads of 64, as the paper's) in
    # bfloat16 too. With AMX: 0.78x the steps (~7,500), +1.38 BLEU at 30 minutes without dropout
    # (four runs against three), no gain at 6; at that width two layers, label smoothing 0.2 and
    # other batch sizes lose
    # (bench/RESULTS.md, "The 30-minute recipe re-fitted: depth, batch and label smoothing at d_model 256").
    # With AVX512_BF16 alone the 2-core EPYC trains ~11,000 steps, where the wide model with dropout
    # gained +2.78 BLEU (two runs against two)
    # (bench/RESULTS.md, "The 30-minute recipe re-fitted: width and dropout on AVX512_BF16").
    "small": Preset(
        model=dict(num_layers=3, d_model=128, d_ff=512, num_heads=4, dropout=0.0, norm_first=True),
        training=dict(
            batch_tokens=1024, learning_rate_scale=2.0, warmup_fraction=0.1, cooldown_fraction=0.2, steps_per_epoch=200
        ),
        budget_fits={None: SMALL_LONG, "amx_bf16": SMALL_WIDE, "avx512_bf16": SMALL_WIDE},
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


def setting(default: Any, help: str, **metadata: Any) -> Any:
    """A dataclass field with its command-line help (`cli/flags.py` reads `metadata["help"]`)."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


FFN_ACTIVATIONS = ("relu", "swish")  # `TransformerConfig.ffn_activation`
SINUSOID_LAYOUTS = ("interleaved", "halves", "tensor2tensor")  # `TransformerConfig.sinusoid_layout`


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the model (§3, Table 3), in the paper's names.

    Source and target share one subword vocabulary and one embedding matrix (§3.4), so
    `vocab_size` is the size of that joint vocabulary, the reserved ids of `special_tokens`
    included. `dropout` is the one field that shapes no weight: a resumed or fine-tuned run may
    change it (`architecture()` is what must match).
    """

    vocab_size: int = setting(8000, "subword vocabulary size, source and target shared (§3.4)")
    num_layers: int = setting(
        6, "N, identical layers in each of the encoder and the decoder (the default of both depths)"
    )
    d_model: int = setting(512, "d_model, width of every sub-layer output")
    d_ff: int = setting(2048, "d_ff, inner width of the position-wise feed-forward network")
    num_heads: int = setting(8, "h, parallel attention heads; d_k = d_v = d_model / h")
    dropout: float = setting(0.1, "P_drop, residual and embedding dropout (§5.4)")
    max_length: int = setting(256, "longest sequence, in subword tokens including start/EOS")
    layer_norm_epsilon: float = setting(1e-6, "added to the variance in every LayerNorm")
    norm_first: bool = setting(False, "False: the paper's LayerNorm(x + Sublayer(x)); True: x + Sublayer(LayerNorm(x))")
    # Deviation from the paper: an encoder and a decoder of different depths (a deep encoder with a
    # shallow decoder decodes 2-3x faster at the same BLEU; Kasai et al., 2021).
    num_encoder_layers: int | None = setting(None, "N of the encoder alone (default: num_layers)")
    num_decoder_layers: int | None = setting(None, "N of the decoder alone (default: num_layers)")
    # Deviation from the paper: swish (SiLU, x sigmoid(x); Ramachandran et al., 2017) in place of Eq. 2's ReLU.
    ffn_activation: str = setting(
        "relu", "feed-forward activation: relu (Eq. 2) or swish (most OPUS-MT models)", choices=FFN_ACTIVATIONS
    )
    # Deviation from the paper: "halves" and "tensor2tensor" put the sines in the first half of the
    # dimensions and the cosines in the second; tensor2tensor's and Marian's frequencies also differ
    # (`layers.embedding.sinusoid_table`).
    sinusoid_layout: str = setting(
        "interleaved", "positional encoding: interleaved (§3.5), halves or tensor2tensor", choices=SINUSOID_LAYOUTS
    )
    # Deviation from the paper: a learned bias b on the output logits, x E^T + b (Marian's).
    output_bias: bool = setting(False, "a learned bias on the output logits (Marian's)")
    # Deviation from the paper: the decoder's first input is a zero vector (plus position 0's encoding),
    # not the start token's embedding (Marian's).
    start_from_zero_embedding: bool = setting(False, "the decoder starts from a zero embedding (Marian's)")

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
        _check(self.max_length >= 2, f"max_length must be >= 2, got {self.max_length}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            depth = getattr(self, name)
            _check(depth is None or depth >= 1, f"{name} must be >= 1 (or None: num_layers), got {depth}")
        _check(
            self.ffn_activation in FFN_ACTIVATIONS,
            f"ffn_activation must be one of {', '.join(FFN_ACTIVATIONS)}, got {self.ffn_activation!r}",
        )
        _check(
            self.sinusoid_layout in SINUSOID_LAYOUTS,
            f"sinusoid_layout must be one of {', '.join(SINUSOID_LAYOUTS)}, got {self.sinusoid_layout!r}",
        )
        _check(
            self.sinusoid_layout != "tensor2tensor" or self.d_model >= 4,
            f"sinusoid_layout tensor2tensor needs d_model >= 4 (two frequencies), got {self.d_model}",
        )

    @property
    def encoder_depth(self) -> int:
        """N of the encoder: `num_encoder_layers`, else `num_layers`."""
        return self.num_layers if self.num_encoder_layers is None else self.num_encoder_layers

    @property
    def decoder_depth(self) -> int:
        """N of the decoder: `num_decoder_layers`, else `num_layers`."""
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

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

    def architecture(self) -> dict[str, Any]:
        """The fields that shape the weights and the computation: all but `dropout`; a depth equal to
        `num_layers` reads as None (unset), so that 6 and None are the same encoder of a 6-layer model."""
        values = {name: value for name, value in self.to_dict().items() if name != "dropout"}
        for name in ("num_encoder_layers", "num_decoder_layers"):
            values[name] = None if values[name] == self.num_layers else values[name]
        return values

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """The config of `values` (a `to_dict`), also as written by 0.1.0 (config.json, `.keras`
        files), whose model config held the reserved ids and `label_smoothing`: the ids must be
        `special_tokens`' (they always were), label smoothing is a training setting now
        (`ModelDir.read` moves it to the training config)."""
        values = dict(values)
        reserved = tuple(values.pop(name, default) for name, default in LEGACY_RESERVED_IDS.items())
        _check(
            reserved == tuple(LEGACY_RESERVED_IDS.values()),
            f"(pad_id, start_id, eos_id) must be the tokenizer's reserved ids {(PAD_ID, START_ID, EOS_ID)}, "
            f"got {reserved}",
        )
        values.pop("label_smoothing", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {', '.join(unknown)}")
        return cls(**values)


# The reserved ids' fields of a 0.1.0 TransformerConfig, and the only values they could have.
LEGACY_RESERVED_IDS = {"pad_id": PAD_ID, "start_id": START_ID, "eos_id": EOS_ID}


_WEIGHTED = re.compile(r"^(.+):(\d+(?:\.\d*)?(?:e-?\d+)?|\.\d+)$")
_LANGUAGE = r"[a-z]{2,3}"
_PAIR = re.compile(rf"(?<![a-z])({_LANGUAGE})-({_LANGUAGE})(?![a-z])")


def language_pair(spec: str) -> tuple[str, str] | None:
    """(source, target) languages that a source's name says, its last `xx-yy` (ISO 639 codes):
    "bible-en-fr" -> ("en", "fr"), "data/news.en-de.tsv.gz" -> ("en", "de"); else None."""
    pairs = _PAIR.findall(spec.lower())
    return pairs[-1] if pairs else None


def weighted_sources(spec: str) -> tuple[tuple[str, float], ...]:
    """The sources of a `--data` value and the share of training pairs drawn from each:
    "bible-en-de:0.3,software-en-de:0.7" -> (("bible-en-de", 0.3), ("software-en-de", 0.7)) (the
    weights normalised to sum 1). Without weights, a comma-separated list is several sources in
    equal shares when its parts are embedded corpora or `tfds:` names, or when their names say
    different target languages ("bible-en-de,bible-en-fr": a multilingual model); any other value
    is one source, weight 1 (a list of TSV files of one language pair is one source, read together)."""
    parts = [part.strip() for part in spec.split(",")]
    matches = [_WEIGHTED.match(part) for part in parts]
    if not any(matches):
        named = all(part in EMBEDDED or part.startswith("tfds:") for part in parts)
        targets = {(language_pair(part) or ("", ""))[1] for part in parts}
        if len(parts) > 1 and (named or len(targets) > 1):
            matches = [_WEIGHTED.match(f"{part}:1") for part in parts]
        else:
            return ((spec, 1.0),)
    _check(
        all(matches),
        f"weighted sources need a weight on every source (e.g. bible-en-de:0.3,software-en-de:0.7), got {spec!r}",
    )
    weights = [float(match[2]) for match in matches]
    _check(all(w > 0 for w in weights), f"source weights must be > 0, got {spec!r}")
    names = [match[1] for match in matches]
    _check(len(set(names)) == len(names), f"a source is named twice in {spec!r}")
    return tuple((name, weight / sum(weights)) for name, weight in zip(names, weights))


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from, how it is split and sampled, and which pairs are skipped
    (`keras_transformer.data`; the README's "Data"). Field names are the `train` flags' names."""

    data: str = setting(
        BIBLE_EN_DE, "training pairs: bible-en-de, bible-en-fr, software-en-de, TSV path(s), tfds:NAME; S:W,S:W"
    )
    valid_data: str | None = setting(None, "validation pairs (a file, used whole, or tfds:NAME's validation split)")
    test_data: str | None = setting(None, "test pairs for `evaluate` (a file, used whole, or tfds:NAME's test split)")
    reverse: bool = setting(False, "swap source and target")
    valid_pairs: int = setting(3000, "validation pairs scored at every epoch end, at most")
    tokenizer_sample: int = setting(
        50_000, "pairs drawn uniformly from the training split to learn the vocabulary from"
    )
    tokenizer_model: str | None = setting(None, "an existing SentencePiece model to use instead of learning one")
    max_length_ratio: float = setting(
        9.0, "skip training pairs whose longer side has more than this many times the tokens"
    )
    subword_alpha: float = setting(
        0.0, "subword regularisation: sample training segmentations with this alpha (0: off)"
    )
    uppercase_share: float = setting(
        0.0, "share of training pairs presented in ALL CAPS, source and target alike (0: off; e.g. 0.05)"
    )
    titlecase_share: float = setting(
        0.0, "share of training pairs presented in Title Case, source and target alike (0: off; e.g. 0.05)"
    )
    source_noise: float = setting(
        0.0, "character noise on training sources: each character swapped or dropped at X/2 each (0: off; e.g. 0.02)"
    )
    tfds_data_dir: str | None = setting(
        None, "TFDS data directory (default: $TFDS_DATA_DIR, else ~/tensorflow_datasets)"
    )
    tfds_download: bool = setting(False, "download and prepare a tfds:NAME not prepared there (default: fail at once)")
    target_langs: str | None = setting(
        None, "target language of each --data source, e.g. de,fr (default: from its name)"
    )
    source_lang: str | None = setting(
        None, "a TMX source's language to read as sources, e.g. en (default: its name's xx-yy, else its srclang)"
    )
    target_lang: str | None = setting(
        None, "a TMX source's language to read as targets, e.g. de (default: its name's xx-yy, else its other language)"
    )
    clean: bool = setting(
        False,
        "drop bad training pairs as `keras-transformer clean` does (length ratio, too long, copies, wrong script, "
        "duplicates), afresh on every pass",
    )
    user_symbols: str | None = setting(
        None, "pieces a learned vocabulary keeps whole, comma-separated (e.g. '<BT>': backtranslate's --tag)"
    )

    def __post_init__(self):
        _check(bool(self.data), "data must name a data source")
        weighted_sources(self.data)  # checks the weights
        self.languages()  # checks the languages
        _check(self.valid_pairs >= 1, f"valid_pairs must be >= 1, got {self.valid_pairs}")
        _check(self.tokenizer_sample >= 1, f"tokenizer_sample must be >= 1, got {self.tokenizer_sample}")
        _check(self.max_length_ratio >= 1.0, f"max_length_ratio must be >= 1, got {self.max_length_ratio}")
        _check(self.subword_alpha >= 0.0, f"subword_alpha must be >= 0, got {self.subword_alpha}")
        for name in ("uppercase_share", "titlecase_share"):
            share = getattr(self, name)
            _check(0.0 <= share <= 1.0, f"{name} must be in [0, 1], got {share}")
        casing = self.uppercase_share + self.titlecase_share
        _check(
            casing <= 1.0 + 1e-9,
            f"uppercase_share + titlecase_share must be <= 1 (the shares of one draw), got {casing:g}",
        )
        _check(0.0 <= self.source_noise < 1.0, f"source_noise must be in [0, 1), got {self.source_noise}")
        for name in ("source_lang", "target_lang"):
            lang = getattr(self, name)
            _check(
                lang is None or re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", lang) is not None,
                f"{name} must be a language code such as de or pt-br, got {lang!r}",
            )
        bad = [symbol for symbol in self.symbols() if not symbol or any(c.isspace() for c in symbol)]
        _check(not bad, f"user_symbols must be pieces without spaces, comma-separated, got {self.user_symbols!r}")

    def symbols(self) -> tuple[str, ...]:
        """The pieces of `user_symbols`."""
        return tuple(symbol.strip() for symbol in self.user_symbols.split(",")) if self.user_symbols else ()

    def sources(self) -> tuple[tuple[DataConfig, float], ...]:
        """One `DataConfig` per source of `data` (`weighted_sources`) with its weight; each reads
        its own validation split (or `valid_data`, when given: then the first source only)."""
        specs = weighted_sources(self.data)
        langs = self.languages() if self.target_langs else (None,) * len(specs)
        return tuple(
            (dataclasses.replace(self, data=spec, target_langs=lang), weight)
            for (spec, weight), lang in zip(specs, langs)
        )

    def languages(self) -> tuple[str | None, ...]:
        """The target language of each source of `data`: `target_langs`, else what its name says
        (`language_pair`; the source language with `reverse`), None where neither says one."""
        specs = [spec for spec, _ in weighted_sources(self.data)]
        if self.target_langs:
            langs = tuple(lang.strip() for lang in self.target_langs.split(","))
            _check(
                len(langs) == len(specs),
                f"target_langs names {len(langs)} language(s) for {len(specs)} source(s) of {self.data!r}",
            )
            bad = [lang for lang in langs if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", lang)]
            _check(not bad, f"target_langs must be language codes such as de or pt-br, got {', '.join(bad)}")
            return langs
        pairs = [language_pair(spec) for spec in specs]
        langs = tuple(None if pair is None else pair[0 if self.reverse else 1] for pair in pairs)
        _check(
            None not in langs or len(set(langs) - {None}) < 2,
            f"the sources of {self.data!r} have different target languages, but not every name says one: "
            "pass target_langs (--target-langs de,fr), one per source",
        )
        return langs

    @property
    def multilingual(self) -> bool:
        """Whether the sources translate into several languages: then each source sentence starts
        with its target language's token, `<2fr>` (Johnson et al., 2017)."""
        return len(set(self.languages()) - {None}) > 1


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation and regularisation settings (§5.2-5.4) and the batching of the data pipeline."""

    label_smoothing: float = setting(0.1, "epsilon_ls of the loss (§5.4)")
    warmup_steps: int = setting(4000, "steps of linear learning-rate warm-up, then decay by 1/sqrt(step) (Eq. 3: 4000)")
    learning_rate_scale: float = setting(1.0, "multiplies Eq. 3 (1.0 is the paper's)")
    beta_1: float = setting(0.9, "Adam's decay of its gradient mean (§5.3: 0.9)")
    beta_2: float = setting(0.98, "Adam's decay of its squared-gradient mean (§5.3: 0.98)")
    epsilon: float = setting(1e-9, "Adam's term added to the root mean square of the gradients (§5.3: 1e-9)")
    batch_tokens: int = setting(4096, "padded tokens per side (source or target) in a batch, at most (§5.1: ~25000)")
    max_steps: int = setting(100_000, "optimizer steps to train, counted across restarts (the paper's base: 100k)")
    steps_per_epoch: int = setting(500, "checkpoint, validation and log interval, in steps")
    checkpoint_every: int = setting(0, "also checkpoint every this many steps (0: only at epoch ends)")
    keep_checkpoints: int = setting(5, "training checkpoints kept, the newest")
    grad_accumulation: int = setting(1, "micro-batches per optimizer step: the update uses their mean gradient")
    mixed_precision: bool = setting(False, "mixed_float16 on TensorFlow's GPUs, else mixed_bfloat16 (JAX, PyTorch too)")
    jit_compile: bool = setting(False, "compile the training step with XLA")
    shuffle_buffer: int = setting(20_000, "sentence pairs in the shuffle buffer")
    seed: int = setting(1234, "weights, shuffling and dropout")
    time_budget_s: float | None = setting(None, "stop after this much wall-clock time (and fit the schedule to it)")
    dropout_from_steps: int = setting(
        0, "no dropout where the run makes fewer steps than this: max_steps, or the time budget's estimate (0: off)"
    )
    warmup_fraction: float | None = setting(None, "warm-up as a fraction of the step budget, instead of warmup_steps")
    cooldown_fraction: float = setting(0.2, "with warmup_fraction: linear decay to 0 over this last fraction")
    bleu_every_epochs: int = setting(0, "validation BLEU every this many epochs, best weights kept in best/ (0: off)")
    bleu_sentences: int = setting(100, "validation sentences translated for that BLEU")
    early_stopping: int = setting(0, "stop after N evaluations without a better BLEU (or, without BLEU, loss); 0: off")
    ema_decay: float | None = setting(None, "keep a moving average of the weights with this decay (e.g. 0.999) in ema/")
    init_from: str | None = setting(
        None, "fine-tuning: start a new model dir from this model dir's weights and tokenizer"
    )
    init_checkpoint: str = setting("latest", "init_from's weights: latest, averaged, best, ema or a checkpoint path")
    vocabulary: str = setting("keep", "fine-tuning: keep or update", choices=VOCABULARIES)

    def __post_init__(self):
        _check(0.0 <= self.label_smoothing < 1.0, f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        _check(self.bleu_every_epochs >= 0, f"bleu_every_epochs must be >= 0, got {self.bleu_every_epochs}")
        _check(self.bleu_sentences >= 1, f"bleu_sentences must be >= 1, got {self.bleu_sentences}")
        _check(self.vocabulary in VOCABULARIES, f"vocabulary must be keep or update, got {self.vocabulary!r}")
        _check(self.early_stopping >= 0, f"early_stopping must be >= 0, got {self.early_stopping}")
        _check(
            self.ema_decay is None or 0.0 < self.ema_decay < 1.0, f"ema_decay must be in (0, 1), got {self.ema_decay}"
        )
        _check(
            self.ema_decay is None or self.grad_accumulation == 1,
            "ema_decay does not combine with grad_accumulation (Keras would average every micro-batch)",
        )
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
        _check(self.dropout_from_steps >= 0, f"dropout_from_steps must be >= 0, got {self.dropout_from_steps}")
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


def parse_patience(text: str) -> float | None:
    """A `--patience` value: a positive number, or "exact" (None: the exact stopping rule)."""
    if text == "exact":
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"patience must be a positive number or 'exact', got {text!r}")
    return value


DTYPES = ("float32", "bfloat16")


def search_ranges(beam_size, alpha, max_decoding_length, min_decoding_length, repetition_penalty, no_repeat_ngram_size):
    """The ranges of the search's numeric settings, stated once: (holds, message, values) per
    check, in order. The arguments are numbers (`SearchSettings`; `max_decoding_length` math.inf
    for no cap) or tensors of one value per text (an export's `translate_with_options`:
    `exporters/signatures.options_errors`), so the rules use comparisons only (NaN fails them)."""
    return (
        (beam_size >= 1, "beam_size must be >= 1", (beam_size,)),
        (alpha >= 0, "alpha must be >= 0", (alpha,)),
        (max_decoding_length >= 1, "max_decoding_length must be >= 1", (max_decoding_length,)),
        (min_decoding_length >= 0, "min_decoding_length must be >= 0", (min_decoding_length,)),
        (
            min_decoding_length < max_decoding_length,
            "min_decoding_length must be below max_decoding_length",
            (min_decoding_length, max_decoding_length),
        ),
        (repetition_penalty > 0, "repetition_penalty must be > 0", (repetition_penalty,)),
        (no_repeat_ngram_size >= 0, "no_repeat_ngram_size must be >= 0", (no_repeat_ngram_size,)),
    )


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What the search looks for (§6.1): beam search with beam size 4 and length penalty alpha
    0.6, outputs of at most |source| + 50 tokens, and the controls of `search/controls.py`
    (CTranslate2's names and semantics: each changes the logits before the softmax).

    A hypothesis's score is its summed token log-probability divided by the length penalty
    lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016, Eq. 14). The stopping rule (`patience`):
    a sentence stops once round(patience x beam_size) of its hypotheses have ended (1: the rule
    of fairseq and CTranslate2; Kasai et al., 2022), or, with None ("exact"), once no alive
    hypothesis can beat the kept ones (tensor2tensor's; slower, the same BLEU here).
    """

    beam_size: int = setting(4, "beam size K (default 4, the paper's; 1 with --alpha 0: greedy decoding)")
    alpha: float = setting(0.6, "length penalty alpha (default 0.6, the paper's; 0: none)")
    patience: float | None = setting(
        1.0,
        "stop a sentence once round(P x K) of its hypotheses have ended (default 1); 'exact': once no alive "
        "hypothesis can beat the kept ones",
        parse=parse_patience,
        metavar="P|exact",
    )
    length_a: float = setting(1.0, "a of the output length limit a x |source| + b tokens (default 1, §6.1)")
    length_b: int = setting(50, "b of the output length limit a x |source| + b tokens (default 50, §6.1)")
    nbest: int | None = setting(
        None, "hypotheses returned per sentence, best first (default: the best one; translate_nbest: all K)"
    )
    max_decoding_length: int | None = setting(
        None, "at most N generated tokens per sentence, EOS included, whatever its source's length (default: no cap)"
    )
    min_decoding_length: int = setting(
        0, "no EOS before N generated tokens, a target prefix's included (default 0; CTranslate2's default is 1)"
    )
    repetition_penalty: float = setting(
        1.0,
        "divide the positive logits (multiply the negative ones) of tokens already generated by X before the "
        "softmax (default 1: off; >1 discourages repeats; Keskar et al., 2019)",
    )
    no_repeat_ngram_size: int = setting(0, "never generate the same N-gram twice in one output (default 0: off)")
    disable_unk: bool = setting(False, "never generate the unknown token (<unk>, printed as a gap)")
    suppress_sequences: tuple[str, ...] = setting(
        (), "a text whose tokens are never generated in that order", metavar="TEXT", flag="--suppress-sequence"
    )
    shortlist: bool | None = setting(
        None,
        "search over the union of the batch's vocabulary shortlists (the model dir's shortlist.npz, built by "
        "keras-transformer shortlist or train --build-shortlist; CTranslate2's vmap): faster, scores over the "
        "shortlist's softmax (default: wherever the model dir has one and the shapes are dynamic)",
    )

    def __post_init__(self):
        most = math.inf if self.max_decoding_length is None else self.max_decoding_length
        controls = (self.min_decoding_length, self.repetition_penalty, self.no_repeat_ngram_size)
        for holds, message, values in search_ranges(self.beam_size, self.alpha, most, *controls):
            _check(holds, f"{message}, got {' and '.join(map(str, values))}")
        _check(
            self.nbest is None or 1 <= self.nbest <= self.beam_size,
            f"nbest must be between 1 and the beam size {self.beam_size}, got {self.nbest}",
        )
        kept = self.nbest or self.beam_size  # the hypotheses returned
        _check(
            self.patience is None or round(self.patience * self.beam_size) >= kept,
            f"patience must keep at least nbest hypotheses, round(patience x beam_size) >= {kept}, got {self.patience}",
        )
        _check(self.length_a >= 0, f"length_a must be >= 0, got {self.length_a}")
        _check(self.length_b >= 1, f"length_b must be >= 1, got {self.length_b}")
        object.__setattr__(self, "suppress_sequences", tuple(self.suppress_sequences))  # a list from JSON
        for text in self.suppress_sequences:
            _check(isinstance(text, str) and text.strip() != "", f"a suppressed sequence must be text, got {text!r}")


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """Random sampling instead of beam search (`search/sampling.py`; CTranslate2's names; on in
    a `DecodingConfig` when `sampling_topk` is not 1, and top-1 sampling is greedy): the
    log-probabilities divided by the temperature, cut to the top K, then to the nucleus of
    probability P (Holtzman et al., 2020), renormalised; a sample's score is a hypothesis's (the
    model's own log-probabilities, over lp)."""

    sampling_topk: int = setting(
        1, "sample from the K most likely tokens (0: from all; 1, the default: no sampling, beam search)"
    )
    sampling_topp: float = setting(
        1.0, "then from the fewest most likely tokens whose probability reaches P (nucleus; default 1: all)"
    )
    sampling_temperature: float = setting(
        1.0, "divide the log-probabilities by T before sampling (default 1; <1: sharper)"
    )
    num_samples: int = setting(1, "samples drawn per source (default 1; translate prints the best-scoring one)")
    seed: int | None = setting(None, "the sampling's random seed: the same seed, the same samples (default: new)")

    def __post_init__(self):
        _check(self.sampling_topk >= 0, f"sampling_topk must be >= 0, got {self.sampling_topk}")
        _check(0 < self.sampling_topp <= 1, f"sampling_topp must be in (0, 1], got {self.sampling_topp}")
        _check(self.sampling_temperature > 0, f"sampling_temperature must be > 0, got {self.sampling_temperature}")
        _check(self.num_samples >= 1, f"num_samples must be >= 1, got {self.num_samples}")


@dataclasses.dataclass(frozen=True)
class RuntimeSettings:
    """Where and how a search runs; none of these changes a translation (but bfloat16's and int8's rounding)."""

    dtype: str | None = setting(
        None,
        "float32 (as trained, the default) or bfloat16: its speed depends on the CPU (faster with AMX, 0.88-1.56x "
        "float32's with AVX512_BF16 alone, unmeasured without bf16 units)",
        choices=DTYPES,
    )
    int8: bool = setting(
        False,
        "decode with int8 weights (every weight matrix, the embedding's too, in a quarter of the memory; float "
        "activations: Transformer.with_int8); the translations may differ a little from float32's",
    )
    jit_compile: bool = setting(
        False, "decode with XLA: seconds to compile each bucket shape, then faster at small batches"
    )
    max_decode_length: int | None = setting(
        None, "a fixed output length (static shapes, for XLA and fixed-shape exports), also a cap on the limit"
    )
    batch_size: int = setting(32, "sentences per search, sorted by length (default 32)")
    concurrent_batches: int = setting(
        0, "searches run at once, each on a thread and with a cache of its own (default 0: one per core)"
    )

    def __post_init__(self):
        _check(self.dtype in (None, *DTYPES), f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        _check(
            self.max_decode_length is None or self.max_decode_length >= 1,
            f"max_decode_length must be >= 1, got {self.max_decode_length}",
        )
        _check(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        _check(self.concurrent_batches >= 0, f"concurrent_batches must be >= 0, got {self.concurrent_batches}")

    @property
    def static_shapes(self) -> bool:
        """Whether the search runs with static shapes (a fixed-size cache, the whole batch to the
        end): under XLA and with a fixed output length; what a vocabulary shortlist cannot have."""
        return self.jit_compile or self.max_decode_length is not None


DECODING_PARTS = {"search": SearchSettings, "sampling": SamplingSettings, "runtime": RuntimeSettings}
ALIGNMENT_LAYER_HELP = "decoder layer whose attention aligns words (default -2: the penultimate; Garg et al., 2019)"


@dataclasses.dataclass(frozen=True, init=False)
class DecodingConfig:
    """How a trained model translates (§6.1): `search` (`SearchSettings`: what the search looks
    for), `sampling` (`SamplingSettings`, or None: beam search), `runtime` (`RuntimeSettings`:
    where it runs) and `alignment_layer` (what `translate_with_alignments` reads). Read by
    `beam_search`, `Translator`, `export`, the command line and `translator.json`.

    Each setting has one owner, but the settings are flat by name (every name is unique), as the
    command line's flags and translator.json have them: `DecodingConfig(beam_size=1, alpha=0.0)`,
    `config.replace(seed=3)`, `config.to_dict()` and `DecodingConfig.from_dict(flat)` route each
    name to its part; a sampling setting given alone turns sampling on only with `sampling_topk`
    0 or K > 1 (`SamplingSettings`).
    """

    search: SearchSettings
    sampling: SamplingSettings | None
    runtime: RuntimeSettings
    alignment_layer: int

    def __init__(
        self,
        search: SearchSettings | None = None,
        sampling: SamplingSettings | None = None,
        runtime: RuntimeSettings | None = None,
        alignment_layer: int = -2,
        **flat: Any,
    ):
        parts = {"search": search or SearchSettings(), "sampling": sampling, "runtime": runtime or RuntimeSettings()}
        for name, part in DECODING_PARTS.items():
            given = {field: flat.pop(field) for field in _field_names(part) if field in flat}
            if name == "sampling":
                current = dataclasses.asdict(parts["sampling"]) if parts["sampling"] else {}
                values = {**current, **given}
                if values.get("sampling_topk", 1) == 1:  # no sampling: any other sampling setting is an error
                    extra = [
                        field
                        for field in _field_names(SamplingSettings)
                        if field != "sampling_topk"
                        and values.get(field, None) not in (None, _default(SamplingSettings, field))
                    ]
                    _check(not extra, f"{', '.join(extra)} need sampling: set sampling_topk to 0 or K > 1")
                    parts["sampling"] = None
                else:
                    parts["sampling"] = SamplingSettings(**values)
            elif given:
                parts[name] = dataclasses.replace(parts[name], **given)
        _check(not flat, f"unknown decoding settings: {', '.join(sorted(flat))}")
        for name, value in {**parts, "alignment_layer": alignment_layer}.items():
            object.__setattr__(self, name, value)
        _check(not (self.sampling and self.runtime.jit_compile), "sampling runs without jit_compile (XLA)")

    @classmethod
    def greedy(cls, **overrides: Any) -> DecodingConfig:
        """Greedy decoding: beam search with one beam and no length penalty."""
        return cls(**{"beam_size": 1, "alpha": 0.0, **overrides})

    def replace(self, **overrides: Any) -> DecodingConfig:
        """A copy with `overrides` (flat names, or whole parts), checked."""
        if not overrides:
            return self
        parts = {"search": self.search, "sampling": self.sampling, "runtime": self.runtime}
        return DecodingConfig(**{**parts, "alignment_layer": self.alignment_layer, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its flat name (sampling's at their defaults when it is off)."""
        sampling = self.sampling or {name: _default(SamplingSettings, name) for name in _field_names(SamplingSettings)}
        return {
            **dataclasses.asdict(self.search),
            **(dataclasses.asdict(sampling) if self.sampling else sampling),
            **dataclasses.asdict(self.runtime),
            "alignment_layer": self.alignment_layer,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecodingConfig:
        """The config of `to_dict`'s flat names (a translator.json of any version: its other keys ignored)."""
        names = set(decoding_names())
        return cls(**{name: value for name, value in values.items() if name in names})


def decoding_names() -> list[str]:
    """Every decoding setting's flat name (`DecodingConfig`'s parts' fields and the alignment layer)."""
    return [name for part in DECODING_PARTS.values() for name in _field_names(part)] + ["alignment_layer"]


def _field_names(config_class) -> list[str]:
    return [field.name for field in dataclasses.fields(config_class)]


def _default(config_class, name: str) -> Any:
    return next(field.default for field in dataclasses.fields(config_class) if field.name == name)
