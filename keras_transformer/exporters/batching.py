"""`export --batching`: TF Serving's server-side batching, with the policy `keras-transformer serve` uses.

TF Serving merges concurrent Predict requests into one call of a signature when it runs with
`--enable_batching --batching_parameters_file=FILE`; FILE is a `BatchingParameters` text proto
(tensorflow_serving/servables/tensorflow/session_bundle_config.proto; guide:
tensorflow_serving/batching/README.md). `max_batch_size` and `batch_timeout_micros` are the service's
`--max-batch-tokens` (over the tokens of a typical text) and `--batch-timeout-ms`
(`service/batching.py`). The text signatures take a string per text, `[batch]`, so batches of
requests concatenate without padding.
"""

from __future__ import annotations

import os

PARAMETERS = "batching_parameters.txt"
TOKENS_PER_TEXT = 32  # a sentence's source tokens, to turn a token budget into TF Serving's batch size


def batching_parameters(
    max_batch_tokens: int = 4096,
    batch_timeout_ms: float = 5.0,
    num_batch_threads: int | None = None,
    max_enqueued_batches: int = 64,
) -> str:
    """The text of TF Serving's batching parameters for the service's policy: batches of at most
    `max_batch_tokens` / TOKENS_PER_TEXT texts, waiting at most `batch_timeout_ms` for more, run on
    `num_batch_threads` threads (default the CPU count), `max_enqueued_batches` queued (then
    UNAVAILABLE, as the service's 503)."""
    if max_batch_tokens < 1 or batch_timeout_ms < 0 or max_enqueued_batches < 1:
        raise ValueError("max_batch_tokens and max_enqueued_batches must be >= 1, batch_timeout_ms >= 0")
    threads = num_batch_threads or os.cpu_count() or 1
    size = max(1, max_batch_tokens // TOKENS_PER_TEXT)
    return (
        f"max_batch_size {{ value: {size} }}\n"
        f"batch_timeout_micros {{ value: {round(batch_timeout_ms * 1000)} }}\n"
        f"max_enqueued_batches {{ value: {max_enqueued_batches} }}\n"
        f"num_batch_threads {{ value: {threads} }}\n"
    )


def model_config(names: list[str], base: str = "/models") -> str:
    """TF Serving's `--model_config_file` (models.config) serving `names` from `base`/NAME."""
    entries = "".join(
        f'  config {{\n    name: "{name}"\n    base_path: "{base}/{name}"\n    model_platform: "tensorflow"\n  }}\n'
        for name in names
    )
    return f"model_config_list {{\n{entries}}}\n"


def write_batching(out: str, names: list[str], **policy) -> dict[str, str]:
    """OUT/batching_parameters.txt (`batching_parameters(**policy)`) and OUT/models.config for the
    SavedModels `names`, and the server's command line that uses both: {"parameters", "config", "command"}."""
    os.makedirs(out, exist_ok=True)
    paths = {"parameters": os.path.join(out, PARAMETERS), "config": os.path.join(out, "models.config")}
    with open(paths["parameters"], "w", encoding="utf-8") as f:
        f.write(batching_parameters(**policy))
    with open(paths["config"], "w", encoding="utf-8") as f:
        f.write(model_config(names))
    paths["command"] = (
        "tensorflow_model_server --rest_api_port=8501 --model_config_file=/models/models.config "
        f"--enable_batching=true --batching_parameters_file=/models/{PARAMETERS}"
    )
    return paths
