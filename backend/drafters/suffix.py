"""Suffix decoding (SuffixDecoding, Oliaro et al.; Snowflake Arctic Inference): drafts from suffix trees.

Two depth-bounded suffix tries with occurrence counts:
  - a local tree per request over its prompt and its output so far;
  - a global tree over the finished outputs of earlier requests in this process (oldest evicted
    first beyond `max_cached_requests`), so repeated work gets faster across requests.

The global tree is memory across requests (drafter.py's `RemembersRequests`): `fork` gives a drafter
that starts from the tree as it is and keeps what it learns to itself (it reads the parent's tree
until its first change, then works on its own copy; the parent must not learn while a fork reads
it), so runs compared side by side all start alike.

To draft, match ever longer suffixes of the sequence in a tree; from each matched node follow the
most frequent child while the path probability (product of child.count / node.count) stays at or
above `min_token_prob`, for at most `match_len * max_spec_factor + max_spec_offset` tokens. Score a
path by the sum of its token probabilities, keep the best-scoring path (ties go to the longer match)
and the better of the two trees. Drafts are deterministic (q one-hot); the path probabilities are
reported as the drafter's confidence.

Asked for a token tree (`DraftRequest.max_nodes` > 0), each matched node grows a speculation tree
instead, as Arctic Inference's `SuffixTree::_speculate_tree` does (snowflakedb/ArcticInference
`csrc/suffix_decoding/suffix_tree.cc`): a heap of candidate children ranked by path probability,
best first; each one popped joins the draft and offers its own `branching` most frequent children,
those whose path probability is at least `min_token_prob`, until `max_nodes` nodes are drafted.
Where Arctic lets the match length cap the number of nodes and offers every child, here the request
sets the node budget and the children per node, and the match length caps the depth, as it caps a
path's length (so `branching` 1 drafts the chain's path). A tree scores the sum of its nodes' path probabilities (the
number of tokens it expects accepted); like Arctic's `cache.py`, the best tree of the local suffix
tree and the best of the global one are not merged: the higher-scoring one is proposed, the local on
a tie. Nodes come out best first, so the probabilities never rise along the list, every parent comes
before its children and any prefix is a tree; when the same match wins, the tree's first branch is
the path a chain would draft.

Knows nothing about models; it sees token ids only.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

import torch

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.errors import SpecScopeError
from backend.drafters.spec import DrafterSpec, option


class Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, Node] = {}
        self.count = 0


@dataclass
class Speculation:
    """What a suffix tree proposes: tokens with their path probabilities, a chain or (`parents`) a tree."""

    tokens: list[int]
    probs: list[float]
    match_len: int = 0
    parents: list[int] | None = None  # per token, the index of its parent (-1: the newest token); None: a chain

    @property
    def score(self) -> float:
        return sum(self.probs)


class SuffixTree:
    """Counts of every substring of length <= max_depth of the sequences added to it."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = Node()
        self._active: dict[int, list[Node]] = {}  # per sequence: nodes of the suffixes ending at its end

    def extend(self, sequence_id: int, tokens: list[int]) -> None:
        """Append tokens to a sequence: each new position adds the substrings ending there."""
        active = self._active.get(sequence_id, [])
        for token in tokens:
            extended = [self.root, *active[: self.max_depth - 1]]  # substrings that may grow by `token`
            active = []
            for node in extended:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = Node()
                child.count += 1
                active.append(child)
        self._active[sequence_id] = active

    def copy(self) -> SuffixTree:
        """An independent tree with the same counts, children in the same order (so ties break alike)."""
        twin = SuffixTree(self.max_depth)
        pending = [(self.root, twin.root)]
        while pending:
            node, copied = pending.pop()
            copied.count = node.count
            for token, child in node.children.items():
                copied.children[token] = Node()
                pending.append((child, copied.children[token]))
        return twin

    def remove(self, sequence_id: int, tokens: list[int]) -> None:
        """Subtract a whole sequence added under `sequence_id`, deleting nodes no longer used."""
        self._active.pop(sequence_id, None)
        active: list[tuple[Node, Node]] = []  # (parent, node) for the suffixes ending here
        for token in tokens:
            parents = [self.root, *(node for _, node in active[: self.max_depth - 1])]
            active = [(parent, parent.children[token]) for parent in parents]
            for parent, node in active:
                node.count -= 1
                if node.count == 0:
                    del parent.children[token]

    def best_path(
        self, context: list[int], max_tokens: int, max_spec_factor: float, max_spec_offset: float, min_token_prob: float
    ) -> Speculation:
        """The best-scoring path from the matched suffixes of `context`."""
        return self._best_match(
            context,
            max_tokens,
            max_spec_factor,
            max_spec_offset,
            lambda node, depth: _greedy_path(node, depth, min_token_prob),
        )

    def best_tree(
        self,
        context: list[int],
        max_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        max_nodes: int,
        branching: int,
    ) -> Speculation:
        """The best-scoring speculation tree (at most `max_nodes` nodes, `branching` children per
        node) from the matched suffixes of `context`."""
        return self._best_match(
            context,
            max_tokens,
            max_spec_factor,
            max_spec_offset,
            lambda node, depth: _greedy_tree(node, depth, min_token_prob, max_nodes, branching),
        )

    def _best_match(
        self,
        context: list[int],
        max_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        grow: Callable[[Node, int], Speculation],
    ) -> Speculation:
        """Grow a speculation (`grow(node, max depth)`) from the node of every matching suffix of
        `context`, at most `match_len * max_spec_factor + max_spec_offset` deep, and keep the best."""
        best = Speculation([], [])
        for match_len in range(1, min(len(context), self.max_depth - 1) + 1):
            node = self._walk(context[-match_len:])
            if node is None:
                break  # a longer suffix contains this one, so it cannot match either
            found = grow(node, min(max_tokens, int(match_len * max_spec_factor + max_spec_offset)))
            found.match_len = match_len
            if found.score >= best.score:
                best = found
        return best

    def _walk(self, tokens: list[int]) -> Node | None:
        node = self.root
        for token in tokens:
            node = node.children.get(token)
            if node is None:
                return None
        return node


def _greedy_path(node: Node, limit: int, min_token_prob: float) -> Speculation:
    """Follow the most frequent child (the first of equals) while the path probability holds."""
    tokens: list[int] = []
    probs: list[float] = []
    prob = 1.0
    while len(tokens) < limit and node.children:
        token, child = max(node.children.items(), key=lambda item: item[1].count)
        prob *= child.count / node.count
        if prob < min_token_prob:
            break
        tokens.append(token)
        probs.append(prob)
        node = child
    return Speculation(tokens, probs)


def _greedy_tree(node: Node, max_depth: int, min_token_prob: float, max_nodes: int, branching: int) -> Speculation:
    """The `max_nodes` most probable descendants of `node` (path probability >= min_token_prob, at most
    `max_depth` deep, each node's `branching` most frequent children), best first."""
    tokens: list[int] = []
    probs: list[float] = []
    parents: list[int] = []
    # candidates: (-rank, push order, token, path probability, trie node, depth, parent's index in the draft)
    frontier: list[tuple[float, int, int, float, Node, int, int]] = []
    order = count()  # equal probabilities: the first pushed first (the more frequent, else the child seen first)

    def offer_children(parent: Node, prob: float, depth: int, index: int) -> None:
        if depth >= max_depth:
            return
        ranked = sorted(parent.children.items(), key=lambda item: item[1].count, reverse=True)[:branching]
        for token, child in ranked:
            child_prob = prob * child.count / parent.count
            if child_prob >= min_token_prob:  # ranked rounded: equal fractions reached by other products tie
                heapq.heappush(
                    frontier, (-round(child_prob, 12), next(order), token, child_prob, child, depth + 1, index)
                )

    offer_children(node, 1.0, 0, -1)
    while frontier and len(tokens) < max_nodes:
        *_, token, prob, child, depth, parent = heapq.heappop(frontier)
        tokens.append(token)
        probs.append(prob)
        parents.append(parent)
        offer_children(child, prob, depth, len(tokens) - 1)
    return Speculation(tokens, probs, parents=parents)


class SuffixDrafter:
    name = "suffix"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = True

    def __init__(
        self,
        target_tle_per_forward: float,
        max_depth: int = 24,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
        max_cached_requests: int = 1000,
    ) -> None:
        if max_depth < 2:
            raise SpecScopeError(f"suffix max_depth must be at least 2, got {max_depth}")
        if not 0 <= min_token_prob <= 1:
            raise SpecScopeError(f"suffix min_token_prob must be in [0, 1], got {min_token_prob}")
        self.target_tle_per_forward = target_tle_per_forward
        self.max_depth = max_depth
        self.max_spec_factor = max_spec_factor
        self.max_spec_offset = max_spec_offset
        self.min_token_prob = min_token_prob
        self.max_cached_requests = max_cached_requests
        self.global_tree = SuffixTree(max_depth)
        self._cached: OrderedDict[int, list[int]] = OrderedDict()  # request id -> output, oldest first
        self._next_id = 0
        self._forked_at = 0  # request ids above this were learnt by this drafter itself
        self._tree_shared = False  # a fork reads its parent's tree until it first changes it

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, self.target_tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> SuffixSession:
        self._next_id += 1
        return SuffixSession(self, self._next_id, prompt)

    def speculate(self, trees: list[SuffixTree], context: list[int], request: DraftRequest) -> Speculation:
        """The best-scoring speculation of the trees, the first on a tie: a path, or a tree when the
        request asks for one."""
        limits = (request.max_tokens, self.max_spec_factor, self.max_spec_offset, self.min_token_prob)
        found = [
            tree.best_tree(context, *limits, request.max_nodes, request.branching)
            if request.max_nodes > 0
            else tree.best_path(context, *limits)
            for tree in trees
        ]
        return max(found, key=lambda speculation: speculation.score)

    def memory(self) -> dict[str, int]:
        return {"sequences": len(self._cached), "tokens": sum(len(output) for output in self._cached.values())}

    def fork(self) -> SuffixDrafter:
        twin = SuffixDrafter(
            self.target_tle_per_forward,
            self.max_depth,
            self.max_spec_factor,
            self.max_spec_offset,
            self.min_token_prob,
            self.max_cached_requests,
        )
        twin.global_tree, twin._tree_shared = self.global_tree, True
        twin._cached = OrderedDict(self._cached)
        twin._next_id = twin._forked_at = self._next_id
        return twin

    def learned(self) -> list[list[int]]:
        return [output for request_id, output in self._cached.items() if request_id > self._forked_at]

    def learn(self, output: list[int]) -> None:
        self._next_id += 1
        self.remember(self._next_id, output)

    def remember(self, request_id: int, output: list[int]) -> None:
        """Add a finished output to the global tree, evicting the oldest beyond the cap."""
        if not output or self.max_cached_requests == 0:
            return
        if self._tree_shared:
            self.global_tree, self._tree_shared = self.global_tree.copy(), False
        self.global_tree.extend(request_id, output)
        self._cached[request_id] = output
        while len(self._cached) > self.max_cached_requests:
            old_id, old_output = self._cached.popitem(last=False)
            self.global_tree.remove(old_id, old_output)


class SuffixSession:
    def __init__(self, drafter: SuffixDrafter, request_id: int, prompt: list[int]) -> None:
        self.drafter = drafter
        self.request_id = request_id
        self.local_tree = SuffixTree(drafter.max_depth)
        self.local_tree.extend(0, prompt)
        self.output: list[int] = []

    def propose(self, request: DraftRequest) -> Draft:
        context = request.tokens[-self.drafter.max_depth :]
        found = self.drafter.speculate([self.local_tree, self.drafter.global_tree], context, request)
        if not found.tokens:
            return Draft([], stop_reason="no-match")
        evidence = f"m{min(found.match_len, 8)}"
        return Draft(found.tokens, confidence=found.probs, evidence=evidence, parents=found.parents)

    def observe(self, outcome: StepOutcome) -> None:
        self.local_tree.extend(0, outcome.committed)
        self.output.extend(outcome.committed)

    def close(self) -> None:
        self.drafter.remember(self.request_id, self.output)


@dataclass(frozen=True)
class SuffixOptions:
    suffix_max_depth: int = option(24, "suffix tree depth", ge=2, le=128, label="tree depth")
    suffix_max_spec_factor: float = option(
        1.0, "draft at most factor x the matched length", gt=0, le=64, label="max_spec_factor"
    )
    suffix_min_token_prob: float = option(
        0.1, "stop a draft where its path probability falls below this", ge=0, le=1, label="min_token_prob"
    )


def _export(draft_len: int, schedule: dict[int, int], options: SuffixOptions) -> dict[str, object]:
    return {
        "vllm": {
            "method": "suffix",
            "num_speculative_tokens": draft_len,
            "suffix_decoding_max_tree_depth": options.suffix_max_depth,
            "suffix_decoding_max_spec_factor": options.suffix_max_spec_factor,
            "suffix_decoding_min_token_prob": options.suffix_min_token_prob,
        },
        "tensorrt_llm": f"SADecodingConfig(max_draft_len={draft_len})  # suffix automaton, TensorRT-LLM's nearest",
    }


SPEC = DrafterSpec(
    "suffix",
    "suffix decoding: the longest match in suffix trees of this request and earlier outputs",
    SuffixOptions,
    lambda target, options, load: SuffixDrafter(
        target.tle_per_forward,
        options.suffix_max_depth,
        options.suffix_max_spec_factor,
        min_token_prob=options.suffix_min_token_prob,
    ),
    export=_export,
    trees=True,
)
