"""Makes inductor compile each of its kernel templates' Jinja sources once per process instead of at every
render: a one-token package build of the default target took 98-111 s with it, 114-136 s without
(alternating runs on 2 CPU cores).

Why: the one-token graph uses inductor's C++ GEMM template (max-autotune), and inductor renders it for
every candidate blocking of every linear layer, each render starting with `jinja2.Environment.from_string`
on the same constant source (torch/_inductor/codegen/common.py: `KernelTemplate._template_from_string`;
a profile of the default target's one-token build put ~37 s of its ~170 s there). A compiled
jinja2 Template is immutable and renders any options, so memoising it by its source changes no generated
code. Written for torch 2.13 (the pinned version): where the method is missing, inductor is left as it is.
Knows nothing about models or graphs.
"""

from __future__ import annotations

import functools


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
