"""The CPU's vector and matrix units, as the recipe and the benchmarks need to know them.

Linux names them in /proc/cpuinfo; elsewhere (macOS, Windows) no flag is known and every answer is
the conservative one. TensorFlow reaches the CPU's bfloat16 units, AMX's tiles (Intel Xeon from
Sapphire Rapids on) and AVX-512's bfloat16 instructions (AVX512_BF16: AMD from Zen 4 on, Intel from
Cooper Lake on), through oneDNN, which `TF_ENABLE_ONEDNN_OPTS=0` turns off and `ONEDNN_MAX_CPU_ISA`
can cap below them (for example at AVX2, to measure an AVX2 machine's speed on this one).
"""

from __future__ import annotations

import os
import re

CPUINFO = "/proc/cpuinfo"
# ONEDNN_MAX_CPU_ISA values that cap nothing; the levels that keep AMX name it (AVX512_CORE_AMX, ...),
# and those below AMX that keep AVX-512's bfloat16 instructions begin with one of these.
ONEDNN_UNCAPPED = ("", "ALL", "DEFAULT")
ONEDNN_BFLOAT16_LEVELS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10")


def cpu_flags(cpuinfo: str = CPUINFO) -> list[str]:
    """The CPU's vector and matrix ISA flags (AVX2, AVX-512 and its bf16/VNNI parts, AMX), as
    `grep -o 'avx512[a-z_0-9]*\\|avx2\\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u` lists them; none
    where `cpuinfo` cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    return sorted(set(re.findall(r"avx512[a-z_0-9]*|avx2|amx[a-z_0-9]*", text)))


def tensorflow_bfloat16_unit(cpuinfo: str = CPUINFO, environ: dict[str, str] | None = None) -> str | None:
    """The CPU flag of the unit that runs TensorFlow's bfloat16 matmuls here: `amx_bf16` (AMX's
    tiles), else `avx512_bf16` (AVX-512's bfloat16 dot products); None where neither does. oneDNN
    must be on (TF_ENABLE_ONEDNN_OPTS is not 0), and ONEDNN_MAX_CPU_ISA, where set, must keep the unit:
    a level that names AMX keeps both, one of `ONEDNN_BFLOAT16_LEVELS` keeps `avx512_bf16`."""
    environ = os.environ if environ is None else environ
    if environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip() == "0":
        return None
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    flags, keeps_amx = cpu_flags(cpuinfo), cap in ONEDNN_UNCAPPED or "AMX" in cap
    if "amx_bf16" in flags and keeps_amx:
        return "amx_bf16"
    if "avx512_bf16" in flags and (keeps_amx or cap.startswith(ONEDNN_BFLOAT16_LEVELS)):
        return "avx512_bf16"
    return None
