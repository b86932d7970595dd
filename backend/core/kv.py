"""One cached forward pass of a Hugging Face causal LM, and trimming its KV cache.

The engine and the model-based drafters all run "feed these new tokens on top of the cache" and
"forget everything after position n"; this module is the one place that knows how transformers 5.x
spells those (the `cache=` keyword, `DynamicCache.crop` taking a negative count, sliding-window
layers that must record their past before they can be rolled back). A token tree's pass takes a 4D
mask, which transformers' `masking_utils._preprocess_mask_arguments` passes through as given, and
per-node positions; its kept path is then moved into place. It knows nothing about drafting.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache as memoize

import torch
from transformers import DynamicCache, PreTrainedModel

from backend.core.row_attention import hugging_face_rows
from backend.core.tree import TreeLayout, Visibility


@dataclass
class ForwardResult:
    logits: torch.Tensor  # [new_tokens (or logits_to_keep), V] float32; batched: [B, T, V]
    hidden: tuple[torch.Tensor, ...] | None  # per layer index, [new_tokens, hidden] (batched: [B, T, H]) if asked


def new_cache(model: PreTrainedModel) -> DynamicCache:
    return DynamicCache(config=model.config)


def prepare_for_rollback(cache: DynamicCache) -> None:
    """Let sliding-window layers keep what a rollback needs. Call it after the prefill, as
    transformers does, so a long prompt is not held in full by layers that would drop it."""
    cache.activate_past_recording()


def trim_cache(cache: DynamicCache, keep: int) -> None:
    """Keep the first `keep` positions. crop(0) is still called: it shrinks sliding-window layers."""
    surplus = cache.get_seq_length() - keep
    if surplus < 0:
        raise ValueError(f"cannot keep {keep} positions of a cache holding {cache.get_seq_length()}")
    cache.crop(-surplus)


def keep_path(cache: DynamicCache, start: int, path: tuple[int, ...]) -> None:
    """After a tree pass that wrote node i at slot start + i: move the kept path's entries to slots
    start, start + 1, ... and drop the rest. The path is increasing, so every source is at or after
    its destination; gathering before writing makes the overlap safe. RoPE needs no redo: node p_k
    was rotated at position start - 1 + depth = start + k, its new slot. Following EAGLE's
    `update_inference_inputs` (SafeAILab/EAGLE `eagle/model/utils.py`)."""
    count = len(path)
    if list(path) != list(range(count)):  # the first branch is already in place
        source = torch.tensor([start + node for node in path])  # [P] on the host
        with torch.inference_mode():  # the layers hold inference tensors: write them in that mode
            for layer in cache.layers:  # layers may sit on different devices (a model split across GPUs)
                source = source.to(layer.keys.device)
                layer.keys[:, :, start : start + count] = layer.keys.index_select(2, source)  # [1, H, P, D]
                layer.values[:, :, start : start + count] = layer.values.index_select(2, source)
    trim_cache(cache, start + count)


def tree_attention_mask(past: int, tree: TreeLayout, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, T, past + T] additive mask in the model's dtype: 0 where row t may attend (every cached
    slot, and among the new ones itself and its ancestors), the dtype's minimum elsewhere. Additive,
    not bool: eager attention adds the mask to its scores, SDPA takes either."""
    width = tree.width
    allowed = torch.cat(
        [torch.ones(width, past, dtype=torch.bool, device=tree.ancestors.device), tree.ancestors], dim=1
    )  # [T, past + T]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[None, None]  # [1, 1, T, past + T]


@torch.inference_mode()
def cached_forward(
    model: PreTrainedModel,
    token_ids: list[int],
    cache: DynamicCache,
    want_hidden: bool = False,
    logits_to_keep: int = 0,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> ForwardResult:
    """Run `token_ids` (one sequence) on top of `cache`, which grows by len(token_ids).
    logits_to_keep=0 returns logits for every new position, k>0 for the last k only.
    attention_mask [1, 1, T, past + T] and position_ids [1, T] replace the causal defaults (a tree)."""
    device = model.device
    inputs = torch.tensor([token_ids], dtype=torch.long, device=device)  # [1, T]
    kwargs = {_cache_keyword(type(model)): cache, "use_cache": True, "logits_to_keep": logits_to_keep}
    if want_hidden:
        kwargs["output_hidden_states"] = True
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
        kwargs["position_ids"] = position_ids
    with hugging_face_rows(model):  # bf16: each row scored as in a one-token pass (row_attention.py)
        out = model(input_ids=inputs, **kwargs)
    hidden = tuple(h[0] for h in out.hidden_states) if want_hidden else None
    return ForwardResult(out.logits[0].float(), hidden)


def batched_tree_mask(
    valid: torch.Tensor, trees: list[TreeLayout | None], width: int, dtype: torch.dtype
) -> torch.Tensor:
    """[B, 1, T, slots + T] additive mask for a batch pass in which some rows are trees: row i's new
    token t sees row i's valid cached slots (valid [B, slots + T], its first `slots` columns) and,
    among the new tokens, its tree ancestors (a tree row) or those up to itself (a chain row); a
    padding token sees itself only, so no row of the softmax is empty."""
    batch, slots = valid.shape[0], valid.shape[1] - width
    device = valid.device
    new = Visibility.of(trees, width, device).among  # [B, T, T]
    real = valid[:, slots:]  # [B, T]: the row's real new tokens
    new &= real[:, None, :] | torch.eye(width, dtype=torch.bool, device=device)[None]  # padding is seen by no one else
    allowed = torch.cat([valid[:, None, :slots].expand(batch, width, slots), new], dim=2)  # [B, T, slots + T]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask[:, None]  # [B, 1, T, slots + T]


@torch.inference_mode()
def batched_forward(
    model: PreTrainedModel,
    inputs: torch.Tensor,
    valid: torch.Tensor,
    positions: torch.Tensor,
    cache: DynamicCache,
    want_hidden: bool = False,
) -> ForwardResult:
    """inputs [B, T] on top of a batch cache; valid [B, slots + T] marks the slots each row may attend
    to (or a ready [B, 1, T, slots + T] additive mask, batched_tree_mask); positions [B, T] are each
    row's RoPE positions. Returns logits [B, T, V] (float32) and, when asked for, the hidden states per
    layer index, [B, T, H]."""
    with hugging_face_rows(model):
        out = model(
            input_ids=inputs,
            attention_mask=valid,
            position_ids=positions,
            use_cache=True,
            output_hidden_states=want_hidden,
            **{_cache_keyword(type(model)): cache},
        )
    return ForwardResult(out.logits.float(), tuple(out.hidden_states) if want_hidden else None)


@memoize
def _cache_keyword(model_class: type) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; remote-code models may still use the old name."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


# ---------------------------------------------------------------------------------------------------
# batches: one rectangular cache for many sequences, with a [batch, slots] mask of valid slots


def full_attention_layers(cache: DynamicCache) -> list:
    layers = list(cache.layers)
    if any(getattr(layer, "is_sliding", False) for layer in layers):
        raise ValueError(
            "batched decoding needs a model whose layers all use full attention "
            "(this one has sliding-window layers): decode its prompts one at a time"
        )
    return layers


def stack_caches(
    caches: list[DynamicCache], template: DynamicCache, device: torch.device
) -> tuple[DynamicCache, torch.Tensor]:
    """Left-pad single-sequence caches into `template`. Returns (cache, valid [batch, slots] bool)."""
    lengths = [cache.get_seq_length() for cache in caches]
    slots = max(lengths)
    if slots == 0:  # nothing prefilled (one-token prompts): the first batched pass initialises the cache
        return template, torch.zeros(len(caches), 0, dtype=torch.bool, device=device)
    for layer_index, target in enumerate(full_attention_layers(template)):
        keys, values = [], []
        for cache, length in zip(caches, lengths, strict=True):
            layer = cache.layers[layer_index]
            if length:
                k, v = layer.keys, layer.values  # [1, kv_heads, length, head_dim]
            else:
                reference = next(c.layers[layer_index] for c, n in zip(caches, lengths, strict=True) if n)
                k = reference.keys[:1, :, :0]
                v = reference.values[:1, :, :0]
            pad = slots - length
            keys.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
        target.lazy_initialization(keys[0], values[0])
        target.keys, target.values = torch.cat(keys), torch.cat(values)  # [batch, kv_heads, slots, head_dim]
    valid = torch.zeros(len(caches), slots, dtype=torch.bool, device=device)
    for row, length in enumerate(lengths):
        valid[row, slots - length :] = True
    return template, valid


def select_rows(cache: DynamicCache, valid: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Keep only these batch rows (in place for the cache); returns their valid mask."""
    index = torch.tensor(rows, dtype=torch.long, device=valid.device)
    cache.reorder_cache(index)
    return valid.index_select(0, index)


def compact(cache: DynamicCache, valid: torch.Tensor) -> torch.Tensor:
    """Squeeze out invalid slots (rejected drafts, padding), left-padding rows to the longest.
    Returns the new valid mask. Slot order, and so every position's RoPE, is unchanged."""
    counts = valid.sum(dim=1)  # [batch]
    slots = int(counts.max())
    order = torch.argsort((~valid).int(), dim=1, stable=True)  # [batch, slots]: valid slots first, in order
    index = torch.zeros(valid.shape[0], slots, dtype=torch.long, device=valid.device)
    new_valid = torch.zeros(valid.shape[0], slots, dtype=torch.bool, device=valid.device)
    for row in range(valid.shape[0]):
        n = int(counts[row])
        index[row, slots - n :] = order[row, :n]
        new_valid[row, slots - n :] = True
    for layer in full_attention_layers(cache):
        gather = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
        layer.keys = torch.gather(layer.keys, 2, gather)  # padding slots hold copies of slot 0: masked anyway
        layer.values = torch.gather(layer.values, 2, gather)
    return new_valid
