"""What the recipe and the benchmarks read of the CPU: its ISA flags, and whether TensorFlow's
bfloat16 matmuls reach AMX (keras_transformer/cpu.py)."""

from __future__ import annotations

import pytest

from keras_transformer.cpu import cpu_flags, tensorflow_uses_amx

SAPPHIRE_RAPIDS = "flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_vnni\n"
ZEN_4 = "flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"


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
    "text, environ, uses",
    [
        (SAPPHIRE_RAPIDS, {}, True),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "ALL"}, True),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, True),
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),  # capped below AMX
        (SAPPHIRE_RAPIDS, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, False),
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "0"}, False),  # oneDNN off: Eigen, no AMX
        (SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "1"}, True),
        (ZEN_4, {}, False),  # AVX512_BF16 without AMX
    ],
)
def test_tensorflow_uses_amx_where_the_cpu_has_it_and_onednn_may(cpuinfo, text, environ, uses):
    assert tensorflow_uses_amx(cpuinfo(text), environ) is uses
