"""The GPU check on JAX (`bench/gpu_check_jax.py`, issue 38 item 4): `prepare` writes the training
pipeline's own batches; `run` trains `kt.Transformer` through `compile_model` on them on JAX in a
process where TensorFlow cannot be imported (the GPU machine has none), and splits the profiled
step by part of the model (`bench/xla_profile.py`)."""

import json
import os
import pathlib
import string
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

# Runs a script with `import tensorflow` (and its companions) failing as on a machine without them.
WITHOUT_TENSORFLOW = """
import importlib.abc, runpy, sys
class NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tensorflow_datasets", "tf_keras"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the GPU machine has no TensorFlow)")
sys.meta_path.insert(0, NoTensorFlow())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# A fused computation and the entry instructions that call it, as XLA dumps them: the op_names
# carry Keras' layer names, forward and backward.
OP_NAMES = {
    "softmax": "jvp(encoder)/layer_0/self_attention_residual/self_attention/exp",
    "masking": "jvp(encoder)/layer_0/self_attention_residual/self_attention/jit(_where)/select_n",
    "inner": "transpose(jvp(decoder))/layer_1/feed_forward_residual/feed_forward/inner/dot_general",
    "logits": "transpose(jvp())/dot_general",
    "adam": "adam/mul",
    "norm": "jvp(decoder)/layer_0/self_attention_residual/layer_normalization/add",
}
HLO = string.Template("""HloModule jit_one_train_step, entry_computation_layout={()->()}

%fused_computation.1 (param_0.1: f32[8,4,16,16]) -> f32[8,4,16,16] {
  %param_0.1 = f32[8,4,16,16]{3,2,1,0} parameter(0)
  %exponential.1 = f32[8,4,16,16]{3,2,1,0} exponential(%param_0.1), $softmax
  ROOT %add.2 = f32[8,4,16,16]{3,2,1,0} add(%exponential.1, %exponential.1), $masking
}

%fused_computation.2 (param_0.2: bf16[128,64], param_1.2: bf16[64,64]) -> bf16[128,64] {
  %param_0.2 = bf16[128,64]{1,0} parameter(0)
  %param_1.2 = bf16[64,64]{1,0} parameter(1)
  ROOT %dot.3 = bf16[128,64]{1,0} dot(%param_0.2, %param_1.2), lhs_contracting_dims={1}, $inner
}

ENTRY %main.9 (Arg_0.1: f32[8,4,16,16], Arg_1.2: bf16[128,64]) -> (f32[8,4,16,16], bf16[128,64]) {
  %Arg_0.1 = f32[8,4,16,16]{3,2,1,0} parameter(0)
  %Arg_1.2 = bf16[128,64]{1,0} parameter(1)
  %loop_exponential_fusion = f32[8,4,16,16]{3,2,1,0} fusion(%Arg_0.1), kind=kLoop, calls=%fused_computation.1
  %gemm_fusion_dot.3 = bf16[128,64]{1,0} fusion(%Arg_1.2, %Arg_1.2), kind=kCustom, calls=%fused_computation.2
  %custom-call.7 = (bf16[128,1000]{1,0}, s8[4]{0}) custom-call(%Arg_1.2), custom_call_target="__cublas$$gemm", $logits
  %multiply.4 = f32[] multiply(f32[] %c, f32[] %c), $adam
  %add.5 = bf16[128,64]{1,0} add(%Arg_1.2, %Arg_1.2), $norm
  ROOT %tuple.6 = (f32[8,4,16,16]{3,2,1,0}, bf16[128,64]{1,0}) tuple(%loop_exponential_fusion, %gemm_fusion_dot.3)
}
""").substitute(
    {part: f'metadata={{op_name="jit(one_train_step)/jit(main)/{name}"}}' for part, name in OP_NAMES.items()}
)


def test_xla_profile_splits_kernels_by_the_layers_that_named_their_ops():
    from xla_profile import parse_hlo, part_of_kernel, part_of_op, scopes

    instructions = parse_hlo(HLO)
    assert scopes("jit(f)/transpose(jvp(transformer))/decoder/layer_1/feed_forward/inner/dot_general") == [
        "f",
        "transformer",
        "decoder",
        "layer_1",
        "feed_forward",
        "inner",
    ]
    parts = {name: part_of_kernel(instructions[name], "transformer") for name in instructions if "." in name}
    assert parts["gemm_fusion_dot.3"] == "matmuls"  # a fused gemm: the dot inside is W_1's backward
    assert instructions["gemm_fusion_dot.3"]["dot"] and not instructions["loop_exponential_fusion"]["dot"]
    assert part_of_kernel(instructions["loop_exponential_fusion"], "transformer") == "softmax"  # over attention
    assert parts["custom-call.7"] == "output_layer"  # a cuBLAS gemm in the model's own scope: x E^T
    assert parts["multiply.4"] == "optimizer" and parts["add.5"] == "layer_norm"
    assert instructions["custom_call_7"] is instructions["custom-call.7"]  # as kernel names spell it
    assert part_of_kernel(None, "transformer") == "other"
    attention = "jit(train_step)/jvp(decoder)/layer_0/cross_attention_residual/cross_attention"
    assert part_of_op(f"{attention}/bthd,bhsd->bhts/dot_general", "transformer") == "attention"  # Q K^T
    assert part_of_op(f"{attention}/jit(_where)/select_n", "transformer") == "attention"  # the mask
    assert part_of_op(f"{attention}/reduce_max", "transformer") == "softmax"
    assert part_of_op(f"{attention}/key_value/add", "transformer") == "matmuls"  # a Linear's bias
    assert part_of_op("jit(train_step)/jvp()/ne", "transformer") == "other"  # the model's pad mask
    assert part_of_op("jit(train_step)/jvp(transformer)/convert_element_type", "transformer") == "output_layer"


def tiny_prepared(folder) -> pathlib.Path:
    """The tiny preset's first batches of the fixture's pipeline, one shape (one XLA compilation)."""
    import gpu_check_jax
    from conftest import FIXTURE

    out = pathlib.Path(folder) / "batches.npz"
    argv = ["prepare", "--out", str(out), "--preset", "tiny", "--data", str(FIXTURE), "--vocab-size", "300"]
    gpu_check_jax.main([*argv, "--batch-tokens", "256", "--batches", "3", "--max-shapes", "1"])
    return out


@pytest.mark.slow
def test_gpu_check_jax_trains_the_package_on_the_pipelines_batches_without_tensorflow(tmp_path):
    import gpu_check_jax

    from keras_transformer.data.batching import bucket_lengths
    from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

    path = tiny_prepared(tmp_path)
    batches, meta = gpu_check_jax.load_batches(str(path))
    assert len(batches) == 3 and meta["config"]["vocab_size"] <= 300 and meta["training"]["batch_tokens"] == 256
    assert len({target.shape for _, target in batches}) == 1 and 0 < meta["token_share_of_kept_shapes"] <= 1
    for (source, target_in), target_out in batches:
        rows, length = target_out.shape
        assert length in bucket_lengths(128) and rows == 256 // length  # make_batches' token-based buckets
        assert (target_in[:, 0] == START_ID).all() and (source[:, 0] != PAD_ID).all()
        shifted = np.where(target_out[:, :-1] == EOS_ID, PAD_ID, target_out[:, :-1])  # target + EOS -> start + target
        np.testing.assert_array_equal(target_in[:, 1:], shifted)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "KERAS_BACKEND": "jax"}
    argv = ["run", "--batches", str(path), "--steps", "2", "--profile-steps", "2", "--ceiling-size", "128"]
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, str(BENCH / "gpu_check_jax.py"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["tensorflow_imported"] is False and line["model"] == "kt.Transformer via compile_model"
    assert line["target_tokens_per_s"] > 0 and 0 < line["mfu"] < 1 and np.isfinite(line["final_loss"])
    assert line["shapes"] == [list(batches[0][1].shape)] and line["steps"] == 2
    profile = line["profile"]
    assert profile["events_from"] == "host" and profile["busy_ms_per_step"] > 0
    assert sum(profile["parts_ms_per_step"].values()) == pytest.approx(profile["busy_ms_per_step"], rel=0.01, abs=0.01)
    assert profile["share_of_time_in_named_kernels"] > 0.5  # the trace's kernels found in XLA's dump
    for part in ("matmuls", "attention", "softmax", "output_layer", "layer_norm", "dropout", "optimizer"):
        assert profile["parts_ms_per_step"][part] > 0, part
