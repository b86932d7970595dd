"""Token trees: the shape of a draft that proposes several continuations at once.

A tree draft lists its nodes in topological order (every parent before its children) with a parent
index per node; -1 is the root, the newest committed token x, which the target scores with the
nodes in one pass. A chain is the tree whose parents are [-1, 0, 1, ...]. Because parents come
first, any prefix of the node list is itself a tree, and a root path p_1 < p_2 < ... is increasing.

Row 0 of every tensor here is the root and row i + 1 is node i, matching the rows of the target's
pass over [x, n_1 .. n_N]. The ancestor matrix is built as EAGLE-2 builds its tree mask (row by row,
each node's row = its parent's row plus itself; SafeAILab/EAGLE `eagle/model/cnets.py::topK_genrate`).

Pure host-side helpers and one small layout of tensors; this module knows nothing about models,
caches or acceptance rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.core.errors import SpecScopeError


def validate(parents: list[int]) -> None:
    """Raise unless every node's parent is the root (-1) or an earlier node."""
    for node, parent in enumerate(parents):
        if not -1 <= parent < node:
            raise SpecScopeError(f"tree node {node} has parent {parent}: a parent must be -1 or an earlier node")


def is_chain(parents: list[int]) -> bool:
    """Whether the tree is one branch: node i's parent is node i - 1."""
    return all(parent == node - 1 for node, parent in enumerate(parents))


def depths(parents: list[int]) -> list[int]:
    """Each node's depth; the root's children have depth 1."""
    found: list[int] = []
    for parent in parents:
        found.append(found[parent] + 1 if parent >= 0 else 1)
    return found


def path_to(parents: list[int], node: int) -> list[int]:
    """The nodes from a child of the root down to `node`, in order ([] for the root, node -1)."""
    path: list[int] = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def children(parents: list[int]) -> list[list[int]]:
    """Per row (0 = root, i + 1 = node i), the child nodes in list order."""
    found: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents):
        found[parent + 1].append(node)
    return found


def ancestors(parents: list[int]) -> torch.Tensor:
    """[N+1, N+1] bool on the host: entry [i, j] says row j is row i itself or one of its ancestors
    (row 0 = the root, an ancestor of every row)."""
    size = len(parents) + 1
    mask = torch.eye(size, dtype=torch.bool)  # [N+1, N+1]
    for node, parent in enumerate(parents):
        mask[node + 1] |= mask[parent + 1]
    return mask


def within_depth(parents: list[int], max_depth: int) -> tuple[list[int], list[int]]:
    """(kept nodes, their parents renumbered): the nodes at depth <= max_depth, still in order."""
    kept = [node for node, depth in enumerate(depths(parents)) if depth <= max_depth]
    number = {node: index for index, node in enumerate(kept)}
    return kept, [number[parents[node]] if parents[node] >= 0 else -1 for node in kept]


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
