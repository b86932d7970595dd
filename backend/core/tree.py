"""Token trees: the shape of a draft that proposes several continuations at once.

A tree draft lists its nodes in topological order (every parent before its children) with a parent
index per node; -1 is the root, the newest committed token x, which the target scores with the
nodes in one pass. A chain is the tree whose parents are [-1, 0, 1, ...]. Because parents come
first, any prefix of the node list is itself a tree, and a root path p_1 < p_2 < ... is increasing.

Row 0 of every tensor here is the root and row i + 1 is node i, matching the rows of the target's
pass over [x, n_1 .. n_N]. The ancestor matrix is built as EAGLE-2 builds its tree mask (row by row,
each node's row = its parent's row plus itself; SafeAILab/EAGLE `eagle/model/cnets.py::topK_genrate`).

The shape of a tree as plain lists (parents, depths, paths, children) is tree_shape.py's, which the
dashboard reads too; this module adds the ancestor matrix and the tensors a pass needs (`Visibility`:
what a pass's new tokens see of each other, chains and trees alike, row by row for a batch). It knows
nothing about models, caches or acceptance rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from backend.core.tree_shape import depths, validate


def ancestors(parents: list[int]) -> torch.Tensor:
    """[N+1, N+1] bool on the host: entry [i, j] says row j is row i itself or one of its ancestors
    (row 0 = the root, an ancestor of every row)."""
    size = len(parents) + 1
    mask = torch.eye(size, dtype=torch.bool)  # [N+1, N+1]
    for node, parent in enumerate(parents):
        mask[node + 1] |= mask[parent + 1]
    return mask


@dataclass(frozen=True)
class TreeLayout:
    """One step's tree on the device: what the target pass and verification need.
    Build it with `TreeLayout.of(parents, device)`."""

    parents: tuple[int, ...]  # [N] parent per node, -1 = root
    depths: torch.Tensor  # [N+1] long, root 0
    ancestors: torch.Tensor  # [N+1, N+1] bool, ancestor-or-self, root included
    parent_rows: torch.Tensor  # [N] long: the row of each node's parent (parents + 1)

    @classmethod
    def of(cls, parents: list[int], device: torch.device) -> TreeLayout:
        validate(parents)
        return cls(
            tuple(parents),
            torch.tensor([0, *depths(parents)], dtype=torch.long, device=device),
            ancestors(parents).to(device),
            torch.tensor(parents, dtype=torch.long, device=device) + 1,
        )

    @property
    def width(self) -> int:
        """Rows of the pass: the root plus the nodes."""
        return len(self.parents) + 1


class Visibility(NamedTuple):
    """What a pass's new tokens see of each other, per row: offsets [B, T] long (a token's RoPE position
    past the row's length: t for a chain, a node's depth in a tree) and among [B, T, T] bool (token t
    sees token u). Every row sees its own cached slots."""

    offsets: torch.Tensor
    among: torch.Tensor

    @classmethod
    def chains(cls, batch: int, width: int, device: torch.device) -> Visibility:
        offsets = torch.arange(width, device=device)[None].repeat(batch, 1)  # [B, T]
        among = torch.ones(width, width, dtype=torch.bool, device=device).tril()  # [T, T]
        return cls(offsets, among[None].repeat(batch, 1, 1))

    @classmethod
    def of(cls, trees: list[TreeLayout | None], width: int, device: torch.device) -> Visibility:
        """Row i is trees[i] (its root and nodes first; any padding after them sees itself only), or a
        chain where trees[i] is None."""
        offsets, among = cls.chains(len(trees), width, device)
        for row, tree in enumerate(trees):
            if tree is not None:
                offsets[row, : tree.width] = tree.depths
                among[row] = torch.eye(width, dtype=torch.bool, device=device)
                among[row, : tree.width, : tree.width] = tree.ancestors
        return cls(offsets, among)
