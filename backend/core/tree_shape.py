"""The shape of a token tree as plain lists: parents, depths, root paths, children, and the part of a
tree within a depth. A tree lists its nodes parents first; node i's parent is -1 (the root: the newest
committed token) or an earlier node (tree.py says more). No tensors here, so the dashboard can read a
step's tree with the engine's own definitions; knows nothing about models or acceptance rules.
"""

from __future__ import annotations

from backend.core.errors import SpecScopeError

MAX_TREE_BUDGET = 64  # drafted nodes per step: with its root, the widest pass the engine verifies


def validate(parents: list[int]) -> None:
    """Raise unless every node's parent is the root (-1) or an earlier node."""
    for node, parent in enumerate(parents):
        if not -1 <= parent < node:
            raise SpecScopeError(f"tree node {node} has parent {parent}: a parent must be -1 or an earlier node")


def has_tree(parents) -> bool:
    """Whether a step record's `parents` describe a tree (a list, or an array as a store frame holds it);
    a chain step has none: None, an empty list, or a frame's missing value."""
    return parents is not None and hasattr(parents, "__len__") and len(parents) > 0


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


def within_depth(parents: list[int], max_depth: int) -> tuple[list[int], list[int]]:
    """(kept nodes, their parents renumbered): the nodes at depth <= max_depth, still in order."""
    return _subtree(parents, [node for node, depth in enumerate(depths(parents)) if depth <= max_depth])


def best_nodes(parents: list[int], path_scores: list[float], budget: int) -> tuple[list[int], list[int]]:
    """(kept nodes, their parents renumbered): the `budget` nodes of highest path score, still in order.
    A path score (a product of probabilities, or its log) never exceeds its parent's, so the kept set
    holds every kept node's ancestors; ties go to the earlier node, which keeps a parent before its
    child. This is EAGLE-2's rerank of a grown tree to the verification budget."""
    ranked = sorted(range(len(parents)), key=lambda node: (-path_scores[node], node))
    return _subtree(parents, sorted(ranked[: max(budget, 0)]))


def _subtree(parents: list[int], kept: list[int]) -> tuple[list[int], list[int]]:
    """(kept, their parents renumbered) for kept nodes in order whose ancestors are all kept."""
    number = {node: index for index, node in enumerate(kept)}
    return kept, [number[parents[node]] if parents[node] >= 0 else -1 for node in kept]
