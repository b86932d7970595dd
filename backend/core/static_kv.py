"""A static KV cache: per-layer keys and values preallocated for a request, and a length per row.

`fast_forward.py` writes the keys and values of new tokens at slots `length .. length + T - 1` of each
row; nothing is ever concatenated or cropped. Rolling back the rejected drafts of a step is moving a
row's length back: the slots past it hold stale entries that no later query can see, and the next
pass overwrites them. A token tree's accepted path is moved down into place first (`keep_slots`).
Because a row has no holes, a token's slot is its RoPE position, as in vLLM's per-request sequence
lengths over a paged cache.

Knows nothing about models or drafting: it is tensors and lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CAPACITY_STEP = 128  # capacities are rounded up to this, so requests of similar lengths share buffer shapes


@dataclass
class StaticKV:
    keys: list[torch.Tensor]  # per layer [batch, kv_heads, capacity, head_dim]
    values: list[torch.Tensor]  # per layer [batch, kv_heads, capacity, head_dim]
    lengths: torch.Tensor  # [batch] long: slots 0 .. length-1 of each row hold real tokens

    @classmethod
    def allocate(
        cls,
        layers: int,
        batch: int,
        kv_heads: int,
        capacity: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> StaticKV:
        capacity = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        shape = (batch, kv_heads, capacity, head_dim)
        keys = [_marked(torch.zeros(shape, dtype=dtype, device=device)) for _ in range(layers)]
        values = [_marked(torch.zeros(shape, dtype=dtype, device=device)) for _ in range(layers)]
        return cls(keys, values, torch.zeros(batch, dtype=torch.long, device=device))

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def get_seq_length(self, row: int = 0) -> int:
        return int(self.lengths[row])

    def room(self) -> int:
        """New slots the fullest row can still take."""
        return self.capacity - int(self.lengths.max())

    def grow(self, room: int) -> None:
        """Make room for `room` more slots in the fullest row (at least doubling the capacity)."""
        capacity = max(2 * self.capacity, int(self.lengths.max()) + room)
        capacity = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        self.keys = [_marked(_widened(k, capacity)) for k in self.keys]
        self.values = [_marked(_widened(v, capacity)) for v in self.values]

    def keep(self, keep: int | torch.Tensor) -> None:
        """Keep the first `keep` slots of every row (an int) or of each row ([batch] long)."""
        kept = torch.empty_like(self.lengths).copy_(torch.as_tensor(keep))  # dense: compiled graphs guard on strides
        if bool((kept > self.lengths).any()) or bool((kept < 0).any()):
            raise ValueError(f"cannot keep {kept.tolist()} slots of rows holding {self.lengths.tolist()}")
        self.lengths = kept

    def keep_slots(self, start: torch.Tensor, kept: list[list[int]]) -> None:
        """After a pass that wrote row b's new tokens at slots start[b] + t: row b keeps its first
        start[b] slots, then the new slots at offsets kept[b] (increasing), moved into place (a token
        tree's root and accepted path). Every source is at or after its destination, and gathering
        before writing makes the overlap safe; RoPE needs no redo, since a node was rotated at the
        position of its depth, which its new slot is (kv.keep_path does the same for Hugging Face's cache)."""
        for row, offsets in enumerate(kept):
            if offsets != list(range(len(offsets))):  # a chain's accepted tokens are already in place
                first = int(start[row])
                source = torch.tensor(offsets, device=self.lengths.device) + first  # [P]
                for tensor in (*self.keys, *self.values):  # each [B, kv_heads, capacity, head_dim]
                    tensor[row, :, first : first + len(offsets)] = tensor[row].index_select(1, source)
        self.keep(start + torch.tensor([len(offsets) for offsets in kept], device=self.lengths.device))

    def select_rows(self, rows: list[int]) -> None:
        """Keep only these batch rows, in this order."""
        index = torch.tensor(rows, dtype=torch.long, device=self.lengths.device)
        self.keys = [_marked(k.index_select(0, index)) for k in self.keys]
        self.values = [_marked(v.index_select(0, index)) for v in self.values]
        self.lengths = self.lengths.index_select(0, index)


def _widened(tensor: torch.Tensor, capacity: int) -> torch.Tensor:
    wider = tensor.new_zeros(*tensor.shape[:2], capacity, tensor.shape[3])  # [B, kv_heads, capacity, head_dim]
    wider[:, :, : tensor.shape[2]] = tensor
    return wider


def _marked(tensor: torch.Tensor) -> torch.Tensor:
    """One compiled graph serves every capacity (dim 2) and every batch size above 1 (dim 0): the first graph
    for batches is compiled with both symbolic, not specialised on its first batch size and compiled again
    (a minute on a small CPU) at the next one."""
    torch._dynamo.maybe_mark_dynamic(tensor, 0)
    torch._dynamo.maybe_mark_dynamic(tensor, 2)
    return tensor
