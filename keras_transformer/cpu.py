"""The CPU's vector and matrix units, as the recipe and the benchmarks need to know them.

Linux names them in /proc/cpuinfo; elsewhere (macOS, Windows) no flag is known and every answer is
the conservative one. TensorFlow reaches AMX, Intel's bfloat16 tile units (Sapphire Rapids and
later), through oneDNN, which `TF_ENABLE_ONEDNN_OPTS=0` turns off and `ONEDNN_MAX_CPU_ISA` can cap
below AMX (for example at AVX2, to measure an AVX2 machine's speed on this one).
"""

from __future__ import annotations

import os
import re

CPUINFO = "/proc/cpuinfo"
# ONEDNN_MAX_CPU_ISA values that cap nothing; the levels that keep AMX name it (AVX512_CORE_AMX, ...).
ONEDNN_UNCAPPED = ("", "ALL", "DEFAULT")


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


def tensorflow_uses_amx(cpuinfo: str = CPUINFO, environ: dict[str, str] | None = None) -> bool:
    """Whether TensorFlow's bfloat16 matmuls run on AMX here: the CPU has `amx_bf16`, oneDNN is on
    (TF_ENABLE_ONEDNN_OPTS is not 0) and ONEDNN_MAX_CPU_ISA, where set, names an AMX level."""
    environ = os.environ if environ is None else environ
    if environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip() == "0":
        return False
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap not in ONEDNN_UNCAPPED and "AMX" not in cap:
        return False
    return "amx_bf16" in cpu_flags(cpuinfo)
