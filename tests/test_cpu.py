"""What the recipe and the benchmarks read of the CPU: its ISA flags, and which of its units, if
any, runs TensorFlow's bfloat16 matmuls (keras_transformer/cpu.py)."""

from __future__ import annotations

import pytest

from keras_transformer.cpu import cpu_flags, tensorflow_bfloat16_unit

SAPPHIRE_RAPIDS = "flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_vnni\n"
ZEN_4 = "flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
SKYLAKE = "flags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\n"
ZEN_3 = "flags\t\t: fpu sse avx2 fma\n"


@pytest.fixture
def cpuinfo(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(text * 2)  # one line per core: each flag counts once
        return str(path)

    return write


def test_the_flags_are_the_vector_and_matrix_ones_each_once(cpuinfo, tmp_path):
    amx = ["amx_bf16", "amx_int8", "amx_tile"]
    assert cpu_flags(cpuinfo(SAPPHIRE_RAPIDS)) == [*amx, "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f"]
    assert cpu_flags(str(tmp_path / "missing")) == []  # no /proc (macOS, Windows): none known


@pytest.mark.parametrize(
    "text, environ, unit",
    [
        (SAPPHIRE_RAPIDS, {}, "amx_bf16"),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "ALL"}, "amx_bf16"),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, "amx_bf16"),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "avx512_bf16"),  # capped below AMX
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, None),  # and below bfloat16
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, None),
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "0"}, None),  # oneDNN off: Eigen, no bfloat16 unit
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "1"}, "amx_bf16"),
        (ZEN_4, {}, "avx512_bf16"),  # AVX512_BF16 without AMX
        (ZEN_4, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "avx512_bf16"),  # a cap adds no unit
        (ZEN_4, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, None),
        (SKYLAKE, {}, None),  # AVX-512 without its bfloat16 instructions
        (ZEN_3, {}, None),
    ],
)
def test_the_bfloat16_unit_is_the_best_the_cpu_has_and_onednn_may_use(cpuinfo, text, environ, unit):
    assert tensorflow_bfloat16_unit(cpuinfo(text), environ) == unit
