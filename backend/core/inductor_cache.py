"""Lets inductor's on-disk graph cache keep the fast path's CPU graphs, so a later start skips lowering,
code generation and the C++ build of the target's graphs (minutes on a small CPU).

Why it is needed: with weight freezing on the CPU, inductor packs each linear layer's weight into a
oneDNN tensor, and its FX graph cache refuses any graph holding one ("mkldnn tensors unpickleable",
torch/_inductor/codecache.py: `CacheabilityValidator.check_tensor`, `FxGraphCachePickler._reduce_tensor`).
Yet a frozen parameter never needs pickling: the cache key takes only its metadata, and a cached graph
re-attaches its frozen parameters by name from the graph being compiled (torch/_inductor/output_code.py:
`CompiledFxGraph` keeps `frozen_param_names`, `CompiledFxGraphConstantsWithGm` looks them up). Freezing
runs again at every start and packs the same weights under the same names, so the cached code finds
them. This module exempts frozen oneDNN tensors from that refusal and keys them by shape, dtype and
device, as inductor keys any other frozen parameter; unfrozen oneDNN tensors are refused as before.

Written for torch 2.13 (the pinned version): `allow_frozen_onednn_weights` checks the two hooks exist
and otherwise leaves inductor as it is. Knows nothing about models or the passes that use the cache.
"""

from __future__ import annotations

import torch

_applied = False


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

    def check_tensor(tensor: torch.Tensor) -> None:
        if not (tensor.is_mkldnn and is_frozen_param(tensor)):
            refuse(tensor)

    def key_of_tensor(self, tensor: torch.Tensor):
        if tensor.is_mkldnn and is_frozen_param(tensor):  # metadata only, as for any frozen parameter
            return codecache._ident, (("frozen oneDNN weight", tuple(tensor.shape), str(tensor.dtype)),)
        return reduce_tensor(self, tensor)

    validator.check_tensor = staticmethod(check_tensor)
    pickler._reduce_tensor = key_of_tensor
    _applied = True
    return True
