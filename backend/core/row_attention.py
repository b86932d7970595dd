"""Attention whose every query row comes out bit for bit the same whatever the width of its pass.

Why: speculative decoding is lossless only if the target scores a token the same inside a verify pass
of T tokens as in a one-token pass. In fp32 the kernels' low bits differ with T, but greedy argmax
survives that. In bf16 the logits are rounded to bf16's resolution (0.125 at 20), ties are common,
and a tie broken differently in a T-token pass changes the output. The bf16 products themselves are
width-invariant (a row of `F.linear` is the same at M = 1..32); attention is where CPUs differ: the
flash-attention kernel multiplies a block of query rows at once, and on a CPU without bf16 units
(AVX2) a row's scores then depend on how many rows shared its block, in ways that change with the
cache's length and the data (no quick probe of the kernel can vouch for it).

`folded` gives every query row its own head: q [B, H, T, hd] becomes [B, H*T, 1, hd], so the kernel
computes each row alone, exactly as in a one-token pass, and the cache is never copied (with
`enable_gqa`, query head h*T + t reads KV head h // G). It costs up to T one-token attentions, which
at short contexts is small beside the products of a pass. fp32 keeps the plain kernel:
its rounding differences are far below any logit margin that greedy decoding meets. The fast path
calls these directly (fast_forward.py); Hugging Face's own forward calls them through transformers'
attention interface while `hugging_face_rows` is open (kv.py), in bf16 and fp16 only.

Knows nothing about models or caches beyond the tensors it is handed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
REDUCED_PRECISION = (torch.bfloat16, torch.float16)
# Hugging Face's cache holds exactly the tokens seen, so a one-token pass attends over fewer keys than a
# verify pass whose later rows it is compared with; the kernel sums keys in vector lanes, and a different
# count changes which lanes the last ones land in. Keys are padded (masked) to a multiple of this.
KEY_BLOCK = 64


def plain(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """q [B, H, T, hd], keys/values [B, KV, S, hd], visible [B, 1, T, S] (bool, or additive in q's dtype)
    -> [B, H, T, hd]."""
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, enable_gqa=True, scale=scale)


def folded(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """`plain`, each query row attending alone: the same bits as the row's one-token pass. `visible` is
    [B, 1, T, S] (bool, or additive in q's dtype)."""
    batch, heads, width, head_dim = q.shape
    rows = q.reshape(batch, heads * width, 1, head_dim)  # [B, H*T, 1, hd]: row t of head h is head h*T + t
    seen = visible.expand(batch, heads, width, visible.shape[-1]).reshape(batch, heads * width, 1, -1)
    attended = F.scaled_dot_product_attention(rows, keys, values, attn_mask=seen, enable_gqa=True, scale=scale)
    return attended.view(batch, heads, width, head_dim)


def hugging_face_rows(model: PreTrainedModel) -> contextlib.AbstractContextManager:
    """While open, a reduced-precision `model`'s own forward attends through `attention_for`'s choice
    (transformers' attention interface; its own SDPA call differs by width: the mask skipped or not, KV
    heads repeated or not), with a causal mask always built. fp32 models, and attention other than
    transformers' sdpa or eager, are left as they are. Put back on leaving, for whoever runs it after."""
    if model.dtype not in REDUCED_PRECISION or model.config._attn_implementation not in ("sdpa", "eager"):
        return contextlib.nullcontext()
    return _attending_rows(model)


@contextlib.contextmanager
def _attending_rows(model: PreTrainedModel) -> Iterator[None]:
    configs = {id(c): c for c in (model.config, model.config.get_text_config(decoder=True))}.values()
    before = [c._attn_implementation for c in configs]
    for c in configs:
        c._attn_implementation = ROWS
    try:
        yield
    finally:
        for c, implementation in zip(configs, before, strict=True):
            c._attn_implementation = implementation


def _rows_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [B, H, T, hd], key/value [B, KV, S, hd], mask [B, 1, T, S]
    -> ([B, T, H, hd], no weights)."""
    slots = key.shape[2]
    padding = -slots % KEY_BLOCK  # the same vector tail for every row, whatever its own cache's length
    if padding:
        key, value = (F.pad(tensor, (0, 0, 0, padding)) for tensor in (key, value))
        hidden = False if attention_mask.dtype == torch.bool else torch.finfo(attention_mask.dtype).min
        attention_mask = F.pad(attention_mask, (0, padding), value=hidden)
    attended = attention_for(query.dtype)(query, key, value, attention_mask, scaling)  # [B, H, T, hd]
    return attended.transpose(1, 2).contiguous(), None


def _causal_mask_always(*args, **kwargs) -> torch.Tensor | None:
    return sdpa_mask(*args, **{**kwargs, "allow_is_causal_skip": False})


ROWS = "specscope_rows"
AttentionInterface.register(ROWS, _rows_attention)
AttentionMaskInterface.register(ROWS, _causal_mask_always)


def attention_for(dtype: torch.dtype) -> Attention:
    """The attention a target's passes use: `folded` in bf16 and fp16, `plain` otherwise."""
    return folded if dtype in REDUCED_PRECISION else plain
