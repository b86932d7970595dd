"""The KV cache of a batch whose rows accept different numbers of drafts, in the two forms the
engine's target passes take (target_passes.py).

- `RaggedRows` (Hugging Face's forward, `--compile off`): one rectangular DynamicCache
  [B, kv_heads, slots, head_dim] and a mask `valid` [B, slots]. Each pass appends K + 1 slots to every
  row; a row's rejected drafts and padding are masked out rather than cropped (one row cannot be
  cropped alone in a rectangular cache), the tail is cropped where no row needs it, and the cache is
  compacted when masked slots pile up. Positions are explicit per row, so a hole never shifts RoPE.
  A row may be a token tree: its nodes sit at the positions of their depths under a tree mask, and it
  keeps the slots of its accepted path, the others masked like rejected drafts.
- `StaticRows` (the compiled fast path): a StaticKV with a length per row. Each row writes its new
  tokens at its own length and keeps its accepted ones by moving that length: no holes, no
  compaction, as vLLM's per-request sequence lengths over a paged cache. A tree
  row's accepted path is moved down into place (StaticKV.keep_slots).

Prefill hands each sequence its prompt's hidden states. `RaggedRows` prefills prompts one by one
(Hugging Face's forward: measured faster on the CPU than one padded, masked pass). `StaticRows`
prefills rows of similar prompt lengths together (`prefill_groups`): one padded pass per group, each
row's padding written past its own length and dropped by setting the length, as a chunked prefill
batches several requests' prompts. Knows nothing about drafting or verification.
"""

from __future__ import annotations

import torch

from backend.core.engine import Sequence, SpeculativeEngine
from backend.core.kv import (
    ForwardResult,
    batched_forward,
    batched_tree_mask,
    compact,
    select_rows,
    stack_caches,
    trim_cache,
)
from backend.core.tree import TreeLayout, Visibility

HOLES_BEFORE_COMPACTING = 1.5  # compact once the cache is this many times the longest row's real tokens
# A group's padded pass holds at most this many tokens: beyond it a prefill pass is compute-bound on the
# CPU and batching gains nothing (8 prompts of ~300 tokens: 7.7 s one by one, 8.0 s together; 8 of ~60:
# 2.9 s one by one, 1.8 s together).
PREFILL_TOKENS_PER_PASS = 512
PADDING_ALLOWANCE = 1.25  # a group's padded pass computes at most this many times its real tokens


def rows_cache(
    engine: SpeculativeEngine,
    sequences: list[Sequence],
    hidden_layers: tuple[int, ...],
    prefill_tokens_per_pass: int = PREFILL_TOKENS_PER_PASS,
):
    """Prefill every sequence and start its drafter session; the batch's cache in the engine's form."""
    if engine.compile == "on":
        return StaticRows(engine, sequences, hidden_layers, prefill_tokens_per_pass)
    return RaggedRows(engine, sequences, hidden_layers)


def _prefill_each(engine: SpeculativeEngine, sequences: list[Sequence], hidden_layers: tuple[int, ...]) -> list:
    caches = []
    for sequence in sequences:
        cache = engine.passes.new_cache(len(sequence.prompt_ids))
        sequence.start(engine.prefill(sequence.prompt_ids[:-1], cache, hidden_layers))
        caches.append(cache)
    return caches


class RaggedRows:
    def __init__(self, engine: SpeculativeEngine, sequences: list[Sequence], hidden_layers: tuple[int, ...]) -> None:
        self.model, self.device = engine.model, engine.device
        caches = _prefill_each(engine, sequences, hidden_layers)
        self.cache, self.valid = stack_caches(caches, engine.passes.new_cache(0), engine.device)
        self._mask = self.valid

    def forward(
        self, inputs: torch.Tensor, lengths: list[int], want_hidden: bool, trees: list[TreeLayout | None] | None = None
    ) -> ForwardResult:
        """inputs [B, W]: row i's first lengths[i] tokens are real, the rest padding; trees[i] is row i's
        tree layout when its drafts are a tree (its tokens: the newest committed one, then the nodes)."""
        width = inputs.shape[1]
        real = torch.tensor(lengths, device=self.device)[:, None]  # [B, 1]
        new_valid = torch.arange(width, device=self.device)[None, :] < real  # [B, W]
        offsets = Visibility.of(trees or [None] * len(lengths), width, self.device).offsets  # [B, W]
        positions = self.valid.sum(dim=1)[:, None] + offsets  # [B, W]: a tree node's is the root's + its depth
        self._mask = torch.cat([self.valid, new_valid], dim=1)  # [B, slots + W]
        mask = self._mask
        if trees and any(tree is not None for tree in trees):
            mask = batched_tree_mask(self._mask, trees, width, self.model.dtype)  # [B, 1, W, slots + W]
        return batched_forward(self.model, inputs, mask, positions, self.cache, want_hidden)

    def accept(self, kept: list[list[int]]) -> None:
        """Row i keeps the slots at offsets kept[i] of those the last pass added (its newest committed
        token and accepted drafts: 0..a for a chain, 0 and the kept path's rows for a tree)."""
        slots, width = self.valid.shape[1], self._mask.shape[1] - self.valid.shape[1]
        for row, offsets in enumerate(kept):
            keep_row = torch.zeros(width, dtype=torch.bool, device=self.device)  # [W]
            keep_row[offsets] = True
            self._mask[row, slots:] &= keep_row  # rejected drafts, other branches and padding stay masked
        keep = slots + max(max(offsets) + 1 for offsets in kept)
        trim_cache(self.cache, keep)
        self.valid = self._mask[:, :keep]

    def select(self, rows: list[int]) -> None:
        self.valid = select_rows(self.cache, self.valid, rows)

    def tidy(self) -> None:
        if self.valid.shape[1] > HOLES_BEFORE_COMPACTING * int(self.valid.sum(dim=1).max()):
            self.valid = compact(self.cache, self.valid)


def prefill_groups(lengths: list[int], tokens_per_pass: int = PREFILL_TOKENS_PER_PASS) -> list[list[int]]:
    """Rows to prefill together, shortest prompts first: consecutive rows by length share a padded pass
    while it stays within `tokens_per_pass` tokens and PADDING_ALLOWANCE times their real tokens."""
    groups: list[list[int]] = []
    for row in sorted(range(len(lengths)), key=lambda r: lengths[r]):
        if groups:
            padded = (len(groups[-1]) + 1) * lengths[row]  # sorted: this row is the group's longest
            real = sum(lengths[r] for r in groups[-1]) + lengths[row]
            if padded <= tokens_per_pass and padded <= PADDING_ALLOWANCE * real:
                groups[-1].append(row)
                continue
        groups.append([row])
    return groups


class StaticRows:
    def __init__(
        self,
        engine: SpeculativeEngine,
        sequences: list[Sequence],
        hidden_layers: tuple[int, ...],
        prefill_tokens_per_pass: int = PREFILL_TOKENS_PER_PASS,
    ) -> None:
        self.fast = engine.passes.fast
        longest = max(len(s.prompt_ids) for s in sequences)
        room = max(s.max_new_tokens for s in sequences)
        # a row's padding may reach past its own budget by another row's draft count (<= that row's budget)
        self.cache = self.fast.new_cache(longest + 2 * room + 1, len(sequences))
        prompts = [sequence.prompt_ids[:-1] for sequence in sequences]  # the last token starts the first step
        prompt_hidden: list[dict[int, torch.Tensor]] = [{} for _ in sequences]
        for group in prefill_groups([len(prompt) for prompt in prompts], prefill_tokens_per_pass):
            hidden = self._prefill([prompts[row] for row in group], group)
            for at, row in enumerate(group):
                if hidden:
                    prompt_hidden[row] = {layer: hidden[layer][at, : len(prompts[row])] for layer in hidden_layers}
        for sequence, states in zip(sequences, prompt_hidden, strict=True):  # drafter sessions start in row order
            sequence.start(states)
        self._before = self.cache.lengths

    def _prefill(self, prompts: list[list[int]], rows: list[int]) -> tuple[torch.Tensor, ...]:
        """One padded pass over these prompts, their keys and values copied into the batch cache's rows;
        the hidden states per layer index, each [G, longest, H] (empty when every prompt is)."""
        longest = max(len(prompt) for prompt in prompts)
        if longest == 0:
            return ()
        ids = torch.zeros(len(prompts), longest, dtype=torch.long, device=self.fast.device)  # [G, longest]
        for at, prompt in enumerate(prompts):
            ids[at, : len(prompt)] = torch.tensor(prompt, device=self.fast.device)
        group = self.fast.new_cache(longest, len(prompts))
        result = self.fast.forward(ids, group, last_only=True)
        index = torch.tensor(rows, device=self.fast.device)  # [G]
        for batch_layer, group_layer in zip(
            self.cache.keys + self.cache.values, group.keys + group.values, strict=True
        ):
            batch_layer[index, :, :longest] = group_layer[:, :, :longest]  # padding lands past each row's length
        self.cache.lengths[index] = torch.tensor([len(prompt) for prompt in prompts], device=self.fast.device)
        return result.hidden

    def forward(
        self, inputs: torch.Tensor, lengths: list[int], want_hidden: bool, trees: list[TreeLayout | None] | None = None
    ) -> ForwardResult:
        """inputs [B, W]: row i's first lengths[i] tokens are real, the rest padding past them; trees[i] is
        row i's tree layout when its drafts are a tree."""
        if self.cache.room() < inputs.shape[1]:  # a tree wider than the room left for the longest row
            self.cache.grow(inputs.shape[1])
        self._before = self.cache.lengths
        seen = Visibility.of(trees, inputs.shape[1], inputs.device) if trees else None
        return self.fast.forward(inputs, self.cache, seen=seen)

    def accept(self, kept: list[list[int]]) -> None:
        """Row i keeps the slots at offsets kept[i] of those the last pass added (0..a for a chain, 0 and
        the kept path's rows for a tree), moved down into place."""
        self.cache.keep_slots(self._before, kept)

    def select(self, rows: list[int]) -> None:
        self.cache.select_rows(rows)

    def tidy(self) -> None:
        """Nothing to do: rows never hold holes."""
