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
  compaction, as vLLM's per-request sequence lengths over a paged cache (research notes §8.4). A tree
  row's accepted path is moved down into place (StaticKV.keep_slots).

Both prefill prompts one by one (exactly the single-sequence computation; measured faster on the
CPU than one padded pass) and hand each sequence its prompt's hidden states. Knows nothing about
drafting or verification.
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


def rows_cache(engine: SpeculativeEngine, sequences: list[Sequence], hidden_layers: tuple[int, ...]):
    """Prefill every sequence and start its drafter session; the batch's cache in the engine's form."""
    rows = StaticRows if engine.compile == "on" else RaggedRows
    return rows(engine, sequences, hidden_layers)


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


class StaticRows:
    def __init__(self, engine: SpeculativeEngine, sequences: list[Sequence], hidden_layers: tuple[int, ...]) -> None:
        self.fast = engine.passes.fast
        caches = _prefill_each(engine, sequences, hidden_layers)
        longest = max(len(s.prompt_ids) for s in sequences)
        room = max(s.max_new_tokens for s in sequences)
        # a row's padding may reach past its own budget by another row's draft count (<= that row's budget)
        self.cache = self.fast.new_cache(longest + 2 * room + 1, len(sequences))
        for row, single in enumerate(caches):
            length = single.get_seq_length()
            for batch_layer, row_layer in zip(
                self.cache.keys + self.cache.values, single.keys + single.values, strict=True
            ):
                batch_layer[row, :, :length] = row_layer[0, :, :length]
            self.cache.lengths[row] = length
        self._before = self.cache.lengths

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
