"""`keras-transformer train`: train (or resume) a model in --model-dir, on any Keras backend."""

from __future__ import annotations

from keras_transformer.cli.common import log
from keras_transformer.cli.flags import add_config_flags, add_train_flags, train_configs
from keras_transformer.config import PRESETS, STRATEGIES, DataConfig
from keras_transformer.training.backends import BACKENDS


def add(subparsers):
    p = subparsers.add_parser("train", help="train (or resume) a model in --model-dir")
    p.add_argument("--preset", help=f"model and training preset: {', '.join(PRESETS)} (default small)")
    p.add_argument(
        "--config",
        metavar="RECIPE",
        help="settings from a YAML or JSON file (keys: these flags' names, e.g. max_steps), or a model dir's "
        "config.json; flags given here override it",
    )
    p.add_argument(
        "--model-dir",
        required=True,
        help="where checkpoints, the tokenizer and config.json go (resumed if it has them)",
    )
    d = p.add_argument_group("distribution")
    d.add_argument(
        "--backend",
        choices=BACKENDS,
        help="the Keras backend to train on (default $KERAS_BACKEND, else tensorflow); on jax, --strategy auto "
        "and mirrored use every device JAX sees, on torch one device (the README's Training on JAX or PyTorch)",
    )
    d.add_argument(
        "--strategy",
        default="auto",
        choices=STRATEGIES,
        help="tf.distribute strategy (default auto); on --backend jax, auto and mirrored: keras.distribution."
        "DataParallel on every device JAX sees (auto: when it sees several)",
    )
    d.add_argument("--cpu-devices", type=int, help="split the CPU into N logical devices (try mirrored without GPUs)")
    d.add_argument(
        "--collective-timeout", type=float, default=600.0, help="seconds before a multi-worker collective fails"
    )
    p.add_argument(
        "--build-shortlist",
        action="store_true",
        help="after training, count the training pairs into the model dir's vocabulary shortlist (shortlist.npz, "
        "as `keras-transformer shortlist` does), which translate, evaluate and export then search over "
        "(--no-shortlist: not)",
    )
    add_train_flags(p)
    add_config_flags(p, DataConfig, "data (DataConfig; the README's Data)")


def run(args):
    import keras

    from keras_transformer.training.distribute import resolve_strategy, use_cpu_devices
    from keras_transformer.training.trainer import train

    config, training, data = train_configs(args, "small", log)
    if keras.backend.backend() != "tensorflow":  # Keras' distribution; `train` refuses what TensorFlow alone does
        if args.cpu_devices:
            raise ValueError(
                f"--cpu-devices splits the CPU for tf.distribute, not on {keras.backend.backend()} (on jax, "
                "XLA_FLAGS=--xla_force_host_platform_device_count=N makes N CPU devices)"
            )
        strategy = args.strategy
    else:
        if args.cpu_devices:
            use_cpu_devices(args.cpu_devices)
        strategy = resolve_strategy(args.strategy, args.collective_timeout)
    train(args.model_dir, config, training, data, strategy=strategy, log=log)
    if args.build_shortlist:  # counts the training pairs (tf.data and NumPy): on every backend
        from keras_transformer.model_dir.shortlist import build_shortlist

        build_shortlist(args.model_dir, log=log)
