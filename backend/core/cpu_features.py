"""What this CPU multiplies natively, and the precision `--dtype auto` gives the target's passes on it.

Whether bf16 passes beat fp32 ones is a fact about the hardware: CPUs with bf16 matrix units (AMX-BF16
tiles, AVX512-BF16 dot products) multiply bf16 at several times the fp32 rate, so a verify pass of 9-32
tokens costs little more than one token; CPUs without them convert bf16 in software and are slower
than fp32. `auto` therefore reads the CPU's flags first (no bf16 unit: fp32, at no cost), and where a
unit is there confirms it with a probe of a few hundred milliseconds: the target's own widest
projection timed at 1 and 9 rows in both precisions, interleaved. Every run, sweep and benchmark
stores the features named here beside its dtype, so a figure says what hardware it came from.

Knows nothing about models beyond the weight matrix a probe is handed.
"""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

# the flags (Linux /proc/cpuinfo spelling) that decide what a product costs, widest first
MATRIX_FEATURES = ("amx_bf16", "amx_fp16", "amx_int8", "avx512_bf16", "avx512_fp16", "avx512f", "avx2")
BF16_UNITS = ("amx_bf16", "avx512_bf16")
PROBE_WIDTHS = (1, 9)  # a one-token pass and a verify pass of 8 drafts
PROBE_SECONDS = 0.3


@cache
def cpu_features() -> tuple[str, ...]:
    """This CPU's MATRIX_FEATURES, in that order: from /proc/cpuinfo on Linux, else from what torch's own
    probes say (bf16 units and the vector width torch dispatches to)."""
    flags = _cpuinfo_flags()
    if flags is None:
        flags = set()
        if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
            flags.add("amx_bf16")
        if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
            flags.add("avx512_bf16")
        capability = str(torch.backends.cpu.get_cpu_capability())
        flags |= (
            {"avx512f", "avx2"} if capability.startswith("AVX512") else ({"avx2"} if capability == "AVX2" else set())
        )
    return tuple(feature for feature in MATRIX_FEATURES if feature in flags)


def features_of(device: torch.device) -> list[str]:
    """What a run on `device` stores as its CPU's features: this CPU's, or [] off the CPU."""
    return list(cpu_features()) if device.type == "cpu" else []


def has_bf16_unit() -> bool:
    """Does this CPU multiply bf16 in hardware (AMX-BF16 or AVX512-BF16)?"""
    return any(feature in cpu_features() for feature in BF16_UNITS)


def auto_dtype(device: torch.device, weight: torch.Tensor | None) -> tuple[torch.dtype, str]:
    """The dtype `--dtype auto` picks and why: bf16 on CUDA; on a CPU, bf16 where it has a bf16 unit and the
    probe times `weight` ([out, in], the target's widest projection) cheaper in bf16 at both widths, else fp32."""
    if device.type == "cuda":
        return torch.bfloat16, "bfloat16 on CUDA"
    if device.type != "cpu":
        return torch.float32, f"float32 on {device.type}"
    if not has_bf16_unit():
        return torch.float32, "float32: this CPU has no bf16 unit (AMX-BF16 or AVX512-BF16)"
    if weight is None:
        return torch.bfloat16, "bfloat16: this CPU has a bf16 unit"
    ratios = bf16_over_fp32(weight.detach())
    shown = ", ".join(f"{rows} rows {ratio:.2f}x" for rows, ratio in ratios.items())
    if all(ratio < 1.0 for ratio in ratios.values()):
        return torch.bfloat16, f"bfloat16: its products cost {shown} of fp32's here"
    return torch.float32, f"float32: bf16 products cost {shown} of fp32's here"


def bf16_over_fp32(weight: torch.Tensor, seconds: float = PROBE_SECONDS) -> dict[int, float]:
    """Time of x [rows, in] @ weight^T in bf16 over fp32, per PROBE_WIDTHS row count: medians of calls
    interleaved across precisions and widths for about `seconds`."""
    weights = {dtype: weight.to(dtype) for dtype in (torch.float32, torch.bfloat16)}
    inputs = {(dtype, rows): torch.randn(rows, weight.shape[1]).to(dtype) for dtype in weights for rows in PROBE_WIDTHS}
    times: dict[tuple[torch.dtype, int], list[float]] = {key: [] for key in inputs}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or min(len(kept) for kept in times.values()) < 3:
        for (dtype, rows), x in inputs.items():
            start = time.perf_counter()
            F.linear(x, weights[dtype])
            times[dtype, rows].append(time.perf_counter() - start)
    median = {key: sorted(kept)[len(kept) // 2] for key, kept in times.items()}
    return {rows: median[torch.bfloat16, rows] / median[torch.float32, rows] for rows in PROBE_WIDTHS}


def _cpuinfo_flags() -> set[str] | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    flags = next((line.split(":", 1)[1] for line in lines if line.startswith("flags")), None)
    return set(flags.split()) if flags is not None else None
