"""EAGLE-2's dynamic draft tree for the chain heads (EAGLE-3, MTP): the tree grows where the head is
confident, one batched head step per depth, then is cut to the verification budget (Li et al. 2024,
"EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees"; we followed SafeAILab/EAGLE
`eagle/model/cnets.py::topK_genrate`, written anew).

With k = the request's branching and log q the head's log-softmax over its draft vocabulary:

    depth 1:    the k most probable tokens of q(. | h_t), h_t the head's state at the newest committed
                position; score(n) = log q(n)
    depth d+1:  the k depth-d nodes of highest score that are not an end of sequence (the frontier) take
                one head step together, a width-k pass at RoPE position t + d; each proposes its k most
                probable children, score(child) = score(parent) + log q(child | parent's path)
    the end:    depth max_tokens; then the max_nodes nodes of highest score, with their ancestors
                (tree_shape.best_nodes, EAGLE-2's rerank), parents first

In the width-k pass a frontier node's query sees the committed part of the draft cache and, among the
drafted nodes' entries, only its own ancestors and itself (the tree mask), so its state is the one a chain
along its own root path would have reached. The nodes are deterministic picks (Draft.probs is None); the
engine verifies them greedily or by multi-candidate rejection sampling, lossless at any temperature.

Knows nothing about a head's layers, the session's bookkeeping of committed positions, or verification.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from backend.core.drafter import Draft, DraftRequest
from backend.core.tree_shape import best_nodes, depths

if TYPE_CHECKING:
    from backend.drafters.feature_chain import DraftCache, FeatureHead


class TreeAttention:
    """One tree pass's view of the draft cache: appends the pass's keys and values and lets each query see
    only the slots `visible` [n, slots after appending] marks."""

    def __init__(self, cache: DraftCache, visible: torch.Tensor) -> None:
        self.cache, self.visible = cache, visible

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.cache.attend(q, k, v, self.visible)


@dataclass
class GrownTree:
    """Every node the growth drafted, in the order drafted (parents first; siblings most probable first)."""

    tokens: list[int] = field(default_factory=list)  # target token ids
    parents: list[int] = field(default_factory=list)  # -1 = the newest committed token
    scores: list[float] = field(default_factory=list)  # log of the path's probability under the head
    probs: list[float] = field(default_factory=list)  # each node's own probability given its parent's path
    # [H] the state whose logits proposed the node: its parent's own state (the root's: the committed one)
    sources: list[torch.Tensor] = field(default_factory=list)
    slots: dict[int, int] = field(default_factory=dict)  # expanded node -> its slot in the draft cache
    ended: bool = False  # growth stopped short of max_tokens: every frontier candidate was an end of sequence

    def add_children(self, parent: int, source: torch.Tensor, log_q: torch.Tensor, k: int, d2t: torch.Tensor) -> None:
        """The k most probable children of `parent` under log_q [Vd], proposed from state `source` [H]."""
        top = log_q.topk(k)
        base = self.scores[parent] if parent >= 0 else 0.0
        for value, index in zip(top.values.tolist(), d2t[top.indices].tolist(), strict=True):
            self.tokens.append(index)
            self.parents.append(parent)
            self.scores.append(base + value)
            self.probs.append(math.exp(value))
            self.sources.append(source)


def grow(
    head: FeatureHead, cache: DraftCache, last: torch.Tensor, request: DraftRequest, eos_ids: set[int]
) -> GrownTree:
    """EAGLE-2's growth from `last` [1, 1, H], the head's state at the newest committed position, whose draft
    cache holds exactly the committed positions. Leaves the frontier nodes' entries in the cache (the
    caller trims them)."""
    committed, k = len(cache), min(request.branching, head.d2t.numel())
    tree = GrownTree()
    tree.add_children(-1, last[0, 0], _log_q(head, last)[0, 0], k, head.d2t)
    level = list(range(len(tree.tokens)))  # the nodes at the current depth
    for depth in range(1, request.max_tokens):
        candidates = [node for node in level if tree.tokens[node] not in eos_ids]
        if not candidates:
            tree.ended = True
            break
        frontier = sorted(candidates, key=lambda node: (-tree.scores[node], node))[:k]
        ids = torch.tensor([[tree.tokens[node] for node in frontier]], device=head.d2t.device)  # [1, w]
        h = torch.stack([tree.sources[node] for node in frontier])[None]  # [1, w, H]
        positions = torch.full_like(ids, committed + depth - 1)  # [1, w]: a chain's position at this depth
        visible = _tree_mask(tree, frontier, committed, len(cache))  # [w, slots + w]
        out = head.step(head.embed(ids), h, positions, TreeAttention(cache, visible.to(ids.device)))  # [1, w, H]
        log_q = _log_q(head, out)[0]  # [w, Vd]
        level = []
        for row, node in enumerate(frontier):
            tree.slots[node] = len(cache) - len(frontier) + row
            first = len(tree.tokens)
            tree.add_children(node, out[0, row], log_q[row], k, head.d2t)
            level += range(first, len(tree.tokens))
    return tree


def tree_draft(tree: GrownTree, request: DraftRequest) -> Draft:
    """The request's `max_nodes` nodes of highest path score with their ancestors, parents first; each
    node's confidence is its own probability. "eos" when every branch ended before max_tokens."""
    kept, parents = best_nodes(tree.parents, tree.scores, request.max_nodes)
    ended = tree.ended and max(depths(parents)) == max(depths(tree.parents))
    return Draft(
        [tree.tokens[node] for node in kept],
        confidence=[tree.probs[node] for node in kept],
        stop_reason="eos" if ended else None,
        parents=parents,
    )


def _log_q(head: FeatureHead, h: torch.Tensor) -> torch.Tensor:
    """States [..., H] -> the head's log-probabilities over its draft vocabulary [..., Vd] (fp32)."""
    return torch.log_softmax(head.logits(h).float(), dim=-1)


def _tree_mask(tree: GrownTree, frontier: list[int], committed: int, slots: int) -> torch.Tensor:
    """[w, slots + w] bool: frontier row r sees the committed slots, its expanded ancestors' slots and its own
    new slot slots + r."""
    visible = torch.zeros(len(frontier), slots + len(frontier), dtype=torch.bool)
    visible[:, :committed] = True
    for row, node in enumerate(frontier):
        visible[row, slots + row] = True
        parent = tree.parents[node]
        while parent >= 0:
            visible[row, tree.slots[parent]] = True
            parent = tree.parents[parent]
    return visible
