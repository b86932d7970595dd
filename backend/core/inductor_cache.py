"""Lets inductor's on-disk graph cache keep the fast path's CPU graphs, so a later start skips lowering,
code generation and the C++ build of the target's graphs (minutes on a small CPU).

Why it is needed: with weight freezing on the CPU, inductor packs each linear layer's weight into a
oneDNN tensor, and its FX graph cache refuses any graph holding one ("mkldnn tensors unpickleable",
torch/_inductor/codecache.py: `CacheabilityValidator.check_tensor`, `FxGraphCachePickler._reduce_tensor`).
Yet a frozen parameter never needs pickling: a cached graph re-attaches its frozen parameters by name
from the graph being compiled (torch/_inductor/output_code.py: `CompiledFxGraph` keeps
`frozen_param_names`, `CompiledFxGraphConstantsWithGm` looks them up), and freezing runs again at every
start and packs the weights under the same names. This module exempts frozen oneDNN tensors from that
refusal. Inductor keys other frozen parameters by metadata alone; these are keyed by their values too
(a hash of the dense weights, ~1 s for the default target), because lowering may derive new constants
from them that the cache entry stores: the C++ GEMM template re-blocks each weight
(torch/_inductor/codegen/cpp_gemm_template.py), so a graph cached for one checkpoint would otherwise
serve another of the same shapes with stale weights. Graphs built with max-autotune (the one-token
graph, which uses that template) and unfrozen oneDNN tensors are refused as before: the template's
entry holds a re-blocked copy of every weight (~520 MB for the default target), and its key was seen to
differ between processes, so caching it only filled the disk.

Written for torch 2.13 (the pinned version): `allow_frozen_onednn_weights` checks the two hooks exist
and otherwise leaves inductor as it is. Knows nothing about models or the passes that use the cache.
"""

from __future__ import annotations

import hashlib

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

    def admitted(tensor: torch.Tensor) -> bool:
        # with max-autotune the C++ GEMM template stores ~1x the weights in the entry: refused as before
        return tensor.is_mkldnn and is_frozen_param(tensor) and not torch._inductor.config.max_autotune

    def check_tensor(tensor: torch.Tensor) -> None:
        if not admitted(tensor):
            refuse(tensor)

    def key_of_tensor(self, tensor: torch.Tensor):
        if admitted(tensor):
            return codecache._ident, (
                ("frozen oneDNN weight", tuple(tensor.shape), str(tensor.dtype), _digest(tensor)),
            )
        return reduce_tensor(self, tensor)

    validator.check_tensor = staticmethod(check_tensor)
    pickler._reduce_tensor = key_of_tensor
    _applied = True
    return True


def _digest(tensor: torch.Tensor) -> str:
    """A hash of a oneDNN tensor's values, read in the plain dense layout."""
    dense = tensor.to_dense().contiguous()
    return hashlib.blake2b(dense.view(torch.uint8).numpy().data, digest_size=16).hexdigest()
