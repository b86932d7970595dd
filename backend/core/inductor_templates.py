"""Two adjustments to inductor's C++ GEMM template, which the fast path's CPU graphs use (fast_forward.py).

1. Each kernel template's Jinja source is compiled once per process instead of at every render: a
   one-token package build of the default target took 98-111 s with it, 114-136 s without (alternating
   runs on 2 CPU cores). Inductor renders the template for every candidate blocking of every linear
   layer, each render starting with `jinja2.Environment.from_string` on the same constant source
   (torch/_inductor/codegen/common.py: `KernelTemplate._template_from_string`; a profile of the default
   target's one-token build put ~37 s of its ~170 s there). A compiled jinja2 Template is immutable and
   renders any options, so memoising it by its source changes no generated code.
2. On AVX-512 CPUs, fp32 GEMMs may use a register block of 4 rows x 48 columns, beside inductor's 8 x 48,
   8 x 32 and 16 x 16 (torch/_inductor/codegen/cpp_micro_gemm.py: `CppMicroGemmFP32Vec`'s configs).
   Inductor picks a block whose row count divides the rows it was traced with, so a graph traced with 4
   rows (the verify package, aot_packages.py) gets 4 x 48; one traced with a single row keeps 8 x 48 (it
   runs 1-row tails either way). Measured on a 2-core AMD EPYC, frozen fp32 linears (30 x 576 -> 3072,
   212 MB) with the row count symbolic: 8 x 48 took 6.3 / 7.3 / 17.8 / 19.8 / 29.9 ms at M = 2 / 4 / 8 /
   9 / 16, 4 x 48 6.1 / 6.8 / 11.1 / 11.8 / 17.4 (oneDNN's packed GEMM 12.2 / 11.0 / 13.2 / 12.9 / 16.6).

Written for torch 2.13 (the pinned version): where what is patched is missing, inductor is left as it is.
Knows nothing about models or graphs.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

FOUR_ROW_BLOCK = (4, 48, 1)  # rows, columns, depth of one AVX-512 fp32 micro-kernel call


@functools.cache  # once per process
def compile_templates_once() -> bool:
    """Memoise inductor's template compilation by source; returns whether it is in place."""
    try:
        from torch._inductor.codegen.common import KernelTemplate
    except ImportError:
        return False
    compile_source = getattr(KernelTemplate, "_template_from_string", None)
    if compile_source is None:
        return False
    KernelTemplate._template_from_string = staticmethod(functools.cache(compile_source))
    return True


@functools.cache  # once per process
def offer_four_row_blocks() -> bool:
    """Add FOUR_ROW_BLOCK to inductor's AVX-512 fp32 micro-kernel configs; returns whether it is there."""
    try:
        from torch._inductor import lowering  # noqa: F401  (else cpp_micro_gemm imports inductor in a cycle)
        from torch._inductor.codegen import cpp_micro_gemm as micro
    except ImportError:
        return False
    configs = micro.micro_gemm_configs.get(getattr(micro, "CppMicroGemmFP32Vec", None))
    avx512_fp32 = [
        config
        for config in configs or ()
        if config.vec_isa_cls is getattr(micro, "VecAVX512", None)
        and config.input_dtype == config.input2_dtype == config.output_dtype == torch.float
    ]
    if not avx512_fp32 or not dataclasses.is_dataclass(avx512_fp32[0]):
        return False
    blocks = {tuple(config.register_blocking) for config in avx512_fp32}
    if FOUR_ROW_BLOCK not in blocks:
        four_rows = micro.GemmBlocking(*FOUR_ROW_BLOCK)
        configs.insert(0, dataclasses.replace(avx512_fp32[0], register_blocking=four_rows))
    return True


def adjust_templates() -> None:
    """Both adjustments, each made once per process: call before inductor compiles a CPU graph."""
    compile_templates_once()
    offer_four_row_blocks()
