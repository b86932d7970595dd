"""The dtype a trained head holds its matmul weights in while it drafts (the `head_precision` option).

On a CPU a draft step is bound by reading the head's weights from memory: the target's pass just before
it has pushed them out of the caches, and an fp32 head of a few million weights reads tens of MB per drafted
token. Held in float16 (the dtype the weights are saved in, so nothing of them is lost) the same step reads
half as much; on a 2-core AVX2 CPU a draft of D = 3 took 8.2 ms instead of 12.2 for EAGLE-3 and 7.5 instead of
12.6 for MTP, beside a ~32 ms verify pass (docs/measurements/bench_speed_head_precision_cpu.txt).

Only the head's own nn.Linear layers change (never the target's embedding or LM head it borrows): each
becomes a `StoredLinear` that takes and returns activations in their own dtype, multiplying in the weights'
dtype with fp32 accumulation (PyTorch's CPU half-precision matmuls accumulate in fp32), except for products
of many rows (a pass over the prompt) on a CPU without float16 arithmetic, which cost less with the weights
converted and multiplied in the activations' dtype. Whatever the dtype,
the target verifies every draft, so the output is unchanged; only which tokens are proposed can move where
two draft logits lie within half-precision rounding of each other (and a sampled draft's q is the
distribution it was drawn from). A distilled student (the draft-model drafter's shared-embedding folders,
saved in float16 too) holds its own layers the same way as NarrowLinears, which its compiled passes can run
since they do not check each product; its drafting session checks each pass's logits once instead
(autoregressive.py). Its `auto` is bfloat16 where the CPU multiplies it natively (student_dtype).
Knows nothing about any one mechanism or about verification.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from backend.core.cpu_features import has_bf16_unit
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters.trained import TrainedHead

HEAD_PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
AUTO = "auto"
CPU_FLOAT16_ARITHMETIC = torch.ops.mkldnn._is_mkldnn_fp16_supported()  # AVX512-FP16 or AMX-FP16
FLOAT16_ROWS = 8  # above this many rows a float16 product without float16 arithmetic is the slower one


def head_dtype(choice: str, target: LoadedModel) -> torch.dtype:
    """The option's dtype for a trained head: auto is float16 for an fp32 target on a CPU (where drafting is
    memory-bound), otherwise the target's own dtype."""
    if choice == AUTO:
        return torch.float16 if _fp32_on_cpu(target) else target.dtype
    return _chosen(choice)


def student_dtype(choice: str, target: LoadedModel) -> torch.dtype:
    """The option's dtype for a distilled student: auto is bfloat16 for an fp32 target on a CPU with native
    bf16 dot products (AVX512-BF16 or AMX), otherwise the target's own dtype. Unlike a head, a student also
    runs passes of many tokens (its prompt, then whatever the target accepted), and without hardware float16
    arithmetic those cost more in float16 than in float32: on a 2-core AMD EPYC with AVX512-BF16 its pass over
    a 400-token prompt took 160 ms in float16, 46 in float32 and 33 in bfloat16 (a one-token pass 1.7, 2.8
    and 1.7 ms)."""
    if choice == AUTO:
        return torch.bfloat16 if _fp32_on_cpu(target) and has_bf16_unit() else target.dtype
    return _chosen(choice)


def _fp32_on_cpu(target: LoadedModel) -> bool:
    return target.device.type == "cpu" and target.dtype == torch.float32


def _chosen(choice: str) -> torch.dtype:
    if choice not in HEAD_PRECISIONS:
        raise SpecScopeError(f"head_precision must be one of {AUTO}, {', '.join(HEAD_PRECISIONS)}; got '{choice}'")
    return HEAD_PRECISIONS[choice]


class NarrowLinear(nn.Linear):
    """A frozen nn.Linear whose weights are held in a narrower dtype than the activations it takes and
    returns: x [..., in] (any float dtype) -> [..., out] in x's dtype. Unchecked: a product beyond the
    narrow dtype's range leaves an inf or a NaN in what follows, for callers that check their output once
    (a compiled graph cannot branch on every layer's result)."""

    @classmethod
    def holding(cls, linear: nn.Linear, dtype: torch.dtype) -> NarrowLinear:
        narrow = cls(linear.in_features, linear.out_features, linear.bias is not None, linear.weight.device, dtype)
        with torch.no_grad():
            narrow.weight.copy_(linear.weight)
            if linear.bias is not None:
                narrow.bias.copy_(linear.bias)
        return narrow.requires_grad_(False)

    def hold_in(self, dtype: torch.dtype) -> None:
        """Move these weights (its own, never shared) to `dtype`."""
        self.weight = nn.Parameter(self.weight.detach().to(dtype), requires_grad=False)
        if self.bias is not None:
            self.bias = nn.Parameter(self.bias.detach().to(dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return narrow_linear(x, self.weight, self.bias)


class StoredLinear(NarrowLinear):
    """A NarrowLinear that checks its own product: beyond float16's range it multiplies in the activations'
    dtype instead (a head drafts eagerly, so each layer can check)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_in_weight_dtype(x, self.weight, self.bias)


def narrow_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ weight [out, in]^T + bias, multiplied in the weights' dtype, returned in x's dtype."""
    if weight.dtype == x.dtype:
        return F.linear(x, weight, bias)
    return F.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


def linear_in_weight_dtype(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """narrow_linear, multiplied in x's dtype instead where float16 would overflow, or would be the slower:
    a product of many rows on a CPU without float16 arithmetic (such as a head's pass over the prompt)."""
    narrowed_to_float16 = weight.dtype == torch.float16 != x.dtype
    if narrowed_to_float16 and _slow_float16_rows(x):
        return _in_activation_dtype(x, weight, bias)
    out = narrow_linear(x, weight, bias)
    # x or the output beyond float16's range (±65504) leaves an inf or a NaN, and the float32 sum of any
    # finite float16 values is finite: one reduction tells (a third of what isfinite().all() costs a step)
    if narrowed_to_float16 and not math.isfinite(out.sum(dtype=torch.float32).item()):
        return _in_activation_dtype(x, weight, bias)
    return out


def _slow_float16_rows(x: torch.Tensor) -> bool:
    """Would a float16 product of x [..., in] cost more than converting the weights and multiplying in x's
    dtype? Where the CPU has no float16 arithmetic and x has more than FLOAT16_ROWS rows: one 576 -> 3072
    linear on a 2-core AMD EPYC without it took 0.10 ms in float16 against 0.14 in float32 for one row, 0.81
    against 0.36 for 8 and 37.8 against 7.7 for 400 (docs/measurements/bench_speed_student_precision_cpu.txt);
    with the weights' conversion counted, 0.62 ms at 9 rows against 0.82 in float16 (and 0.61 against 0.99
    already at 8: the bound leaves room)."""
    return x.device.type == "cpu" and not CPU_FLOAT16_ARITHMETIC and x.numel() > FLOAT16_ROWS * x.shape[-1]


def _in_activation_dtype(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))


def hold_weights_in(head: TrainedHead, dtype: torch.dtype) -> None:
    """Replace every nn.Linear of `head` (a loaded head at drafting time, never one in training) by a
    StoredLinear in `dtype`, and move the frozen rows it keeps outside them (MTP's copy of the target's LM
    head rows) to `dtype`; nothing changes where the weights are in `dtype` already."""
    replace_linears(head, dtype, StoredLinear)
    head.hold_frozen_rows_in(dtype)


def replace_linears(root: nn.Module, dtype: torch.dtype, kind: type[NarrowLinear]) -> None:
    """Replace every nn.Linear under `root` whose weights are not in `dtype` by a `kind` copy holding them
    in `dtype` (the originals are left as they are, for whoever else holds them)."""
    for module in list(root.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child.weight.dtype != dtype:
                setattr(module, name, kind.holding(child, dtype))
