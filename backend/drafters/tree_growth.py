"""Token trees grown from a drafter's own distributions, shared by the autoregressive drafters (draft
model, layer-skip) and the block drafters (DFlash, DSpark).

A node's path score is the product of the draft probabilities along its path from the root, so it never
exceeds its parent's. Two ways to a tree of at most `budget` nodes:

  - `rerank`: a candidate tree already built (the greedy chain plus each depth's next-best tokens as
    sibling leaves, for drafters that run one forward per depth) is cut to the budget's best nodes by
    `tree_shape.best_nodes` — EAGLE-2's rerank (SafeAILab/EAGLE eagle/model/cnets.py, `topK_genrate`);
  - `grow`: best first from a heap, each popped node expanding into the top-`branching` tokens of the
    distribution its children are drawn from — Medusa's tree of top-k tokens per head
    (FasterDecoding/Medusa medusa/model/utils.py, `generate_candidates`), grown by path score instead of
    a fixed choice list, for drafters that have every depth's distribution after one pass.

Either way nodes come out best first (parents before children), with probs=None: each node is a
deterministic pick, which the engine verifies greedily or by multi-candidate rejection sampling, so a
tree is lossless at any temperature. Knows nothing about models, caches or acceptance rules.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from backend.core.drafter import Draft
from backend.core.tree_shape import best_nodes, depths


@dataclass
class Tree:
    """A grown tree as the engine reads it (Draft.parents), with each node's own draft probability."""

    tokens: list[int]
    parents: list[int]  # -1 = the newest committed token; parents before children, best first
    probs: list[float]  # each node's probability under the distribution it was picked from

    @property
    def depth(self) -> int:
        return max(depths(self.parents), default=0)

    def draft(self, stop_reason: str | None = None) -> Draft:
        parents = self.parents if self.tokens else None  # no nodes: an empty chain
        return Draft(self.tokens, probs=None, confidence=self.probs, stop_reason=stop_reason, parents=parents)


@dataclass
class Children:
    """The candidates below one node: token ids and their probabilities, best first, and what the expansion
    hands on to each child (`state`: whatever the drafter needs to expand it in turn)."""

    tokens: list[int]
    probs: list[float]
    state: Any = None


def top_children(
    probs: torch.Tensor, branching: int, ids: torch.Tensor | None = None, state: Any = None
) -> list[Children]:
    """Per row of probs [n, V'], its `branching` most probable entries as Children; ids [V'] maps an entry to
    its token id (a reduced draft vocabulary's d2t), None when entry i is token i."""
    values, index = probs.float().topk(min(branching, probs.shape[-1]), dim=-1)  # [n, k]
    tokens = ids[index] if ids is not None else index  # [n, k]
    return [Children(row, p, state) for row, p in zip(tokens.tolist(), values.tolist(), strict=True)]


def path_scores(parents: list[int], probs: list[float]) -> list[float]:
    """Each node's path score: its probability times its parent's path score."""
    scores: list[float] = []
    for parent, prob in zip(parents, probs, strict=True):
        scores.append(prob * (scores[parent] if parent >= 0 else 1.0))
    return scores


def rerank(tokens: list[int], parents: list[int], probs: list[float], budget: int) -> Tree:
    """The candidate tree's `budget` nodes of highest path score (best_nodes), ordered best first; ties keep
    list order, so a parent (whose score is at least its child's) stays before its child."""
    scores = path_scores(parents, probs)
    kept, _ = best_nodes(parents, scores, budget)
    order = sorted(kept, key=lambda node: (-scores[node], node))
    number = {node: index for index, node in enumerate(order)}
    return Tree(
        [tokens[node] for node in order],
        [number[parents[node]] if parents[node] >= 0 else -1 for node in order],
        [probs[node] for node in order],
    )


def chain_and_siblings(rows: torch.Tensor, chain: list[int], branching: int, budget: int) -> Tree:
    """rows [n, V]: the distribution at each depth of a greedy chain (chain[d] picked from rows[d]). The
    candidate tree is the chain plus, at each depth, that distribution's next `branching` - 1 tokens as
    leaves beside the chain's node (children of the chain's node one depth up); reranked to the budget."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    above = -1  # the chain's node one depth up
    for depth, (token, best) in enumerate(zip(chain, top_children(rows, branching), strict=True)):
        siblings = [(other, prob) for other, prob in zip(best.tokens, best.probs, strict=True) if other != token]
        node = len(tokens)
        for other, prob in [(token, float(rows[depth, token])), *siblings[: branching - 1]]:
            tokens.append(other)
            parents.append(above)
            probs.append(prob)
        above = node
    return rerank(tokens, parents, probs, budget)


# expand(token, depth, state) -> the candidates for the node's children (at depth + 1), or None for a leaf;
# the root is expanded as (the newest committed token, 0, root_state)
Expand = Callable[[int, int, Any], Children | None]


def grow(root: int, expand: Expand, budget: int, max_depth: int, leaves: set[int], root_state: Any = None) -> Tree:
    """At most `budget` nodes, best path score first, at most `max_depth` deep; a node whose token is in
    `leaves` (end of sequence) gets no children. A node is expanded when it joins the tree."""
    tree = Tree([], [], [])
    # (-path score, order, token, prob, parent index, depth, state)
    frontier: list[tuple] = []
    order = 0

    def push(children: Children | None, score: float, parent: int, depth: int) -> None:
        nonlocal order
        if children is None:
            return
        for token, prob in zip(children.tokens, children.probs, strict=True):
            heapq.heappush(frontier, (-score * prob, order, token, prob, parent, depth, children.state))
            order += 1

    if max_depth > 0:
        push(expand(root, 0, root_state), 1.0, -1, 1)
    while frontier and len(tree.tokens) < budget:
        negative_score, _, token, prob, parent, depth, state = heapq.heappop(frontier)
        tree.tokens.append(token)
        tree.parents.append(parent)
        tree.probs.append(prob)
        if depth < max_depth and token not in leaves:
            push(expand(token, depth, state), -negative_score, len(tree.tokens) - 1, depth + 1)
    return tree
