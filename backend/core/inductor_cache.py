"""Lets inductor's on-disk graph cache keep the fast path's CPU graphs, so a later start skips lowering,
code generation and the C++ build of the target's graphs (minutes on a small CPU).

Why it is needed: with weight freezing on the CPU, inductor packs each linear layer's weight into a
oneDNN tensor, and its FX graph cache refuses any graph holding one ("mkldnn tensors unpickleable",
torch/_inductor/codecache.py: `CacheabilityValidator.check_tensor`, `FxGraphCachePickler._reduce_tensor`).
Yet a frozen parameter never needs pickling: a cached graph re-attaches its frozen parameters by name
from the graph being compiled (torch/_inductor/output_code.py: `CompiledFxGraph` keeps
`frozen_param_names`, `CompiledFxGraphConstantsWithGm` looks them up), and freezing runs again at every
start and packs the weights under the same names. This module exempts frozen oneDNN tensors from that
refusal. Inductor keys other frozen parameters by metadata alone; these are keyed by the values of
the weights they were packed from too, because lowering may derive new constants from them that the
cache entry stores: the C++ GEMM template re-blocks each weight
(torch/_inductor/codegen/cpp_gemm_template.py), so a graph cached for one checkpoint would otherwise
serve another of the same shapes with stale weights. The packed tensors themselves cannot be hashed:
some oneDNN layouts carry uninitialised padding, so their bytes differ between two processes packing
the same weights (seen on the default target's one-token graph, whose key then never matched). The
caller names the weights instead: `keyed_by(linear_weights_digest(module))` around a compiled call;
outside it, oneDNN tensors are refused as before. A one-token graph's entry holds the template's
re-blocked copy of every weight (~520 MB for the default target).

Written for torch 2.13 (the pinned version): `allow_frozen_onednn_weights` checks the two hooks exist
and otherwise leaves inductor as it is. Knows nothing about models or the passes that use the cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import nn

_applied = False
_weights: ContextVar[str | None] = ContextVar("packed_weights_digest", default=None)


def allow_frozen_onednn_weights() -> bool:
    """Let graphs with frozen oneDNN-packed weights into inductor's FX graph cache (once per process).
    Returns whether the hooks are in place."""
    global _applied
    if _applied:
        return True
    try:
        from torch._inductor import codecache
        from torch._inductor.freezing_utils import is_frozen_param
    except ImportError:
        return False
    validator, pickler = codecache.CacheabilityValidator, codecache.FxGraphCachePickler
    if not hasattr(validator, "check_tensor") or not hasattr(pickler, "_reduce_tensor"):
        return False
    refuse = validator.check_tensor
    reduce_tensor = pickler._reduce_tensor

    def admitted(tensor: torch.Tensor) -> bool:
        return tensor.is_mkldnn and is_frozen_param(tensor) and _weights.get() is not None

    def check_tensor(tensor: torch.Tensor) -> None:
        if not admitted(tensor):
            refuse(tensor)

    def key_of_tensor(self, tensor: torch.Tensor):
        if admitted(tensor):
            return codecache._ident, (("frozen oneDNN weight", tuple(tensor.shape), str(tensor.dtype), _weights.get()),)
        return reduce_tensor(self, tensor)

    validator.check_tensor = staticmethod(check_tensor)
    pickler._reduce_tensor = key_of_tensor
    _applied = True
    return True


@contextmanager
def keyed_by(weights: str | None) -> Iterator[None]:
    """Graphs compiled inside this block key their frozen oneDNN weights by `weights` (a digest of the
    weights they are packed from); with None they are refused, as inductor refuses them."""
    token = _weights.set(weights)
    try:
        yield
    finally:
        _weights.reset(token)


def linear_weights_digest(module: nn.Module) -> str:
    """A hash of the names, shapes and values of every linear layer's weight and bias: what freezing
    packs into oneDNN tensors (on the CPU, where the values are read)."""
    return tensors_digest(  # a tied LM head counts as the Linear it is
        (f"{name}.{kind}", tensor)
        for name, layer in module.named_modules()
        if isinstance(layer, nn.Linear)
        for kind, tensor in layer.named_parameters(recurse=False)
    )


def tensors_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """A hash of named tensors' names, shapes, dtypes and values."""
    digest = hashlib.sha1()  # the fastest of hashlib's here (~1.7 GB/s); the keys guard against accidents, not attacks
    for name, tensor in named:
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().data)
    return digest.hexdigest()
