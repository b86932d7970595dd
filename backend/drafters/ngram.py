"""Prompt-lookup (n-gram) drafting: copy what followed the last time the current n-gram appeared.

Looks for the longest n-gram (max_n down to min_n) ending the sequence that also occurs earlier in
prompt + output, and proposes the tokens that followed its most recent earlier occurrence with a full
draft's worth of tokens after it (else the earliest, which has the longest continuation). This is the
idea of prompt lookup decoding (Saxena 2023) and vLLM's `ngram` method (`prompt_lookup_min`,
`prompt_lookup_max`); vLLM keeps the earliest occurrence, we prefer the most recent, which follows
the text being rewritten more closely when an output copies its input. No model, no probabilities:
drafts are deterministic (q one-hot).

Asked for a tree (`DraftRequest.max_nodes`), it merges the continuations of every occurrence of the
longest matching n-gram into a trie and proposes its best branches (`find_continuations`): the
several things that followed the same context, as SGLang's NGRAM worker drafts a BFS over its trie
(sglang `python/sglang/srt/speculative/ngram_worker.py`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.errors import SpecScopeError
from backend.drafters.engine_settings import trtllm_schedule_argument
from backend.drafters.spec import DrafterSpec, option


class NgramDrafter:
    name = "ngram"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = True

    def __init__(self, target_tle_per_forward: float, min_n: int = 1, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise SpecScopeError(f"ngram needs 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.target_tle_per_forward = target_tle_per_forward

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, self.target_tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> NgramSession:
        return NgramSession(self.min_n, self.max_n)


class NgramSession:
    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n

    def propose(self, request: DraftRequest) -> Draft:
        tokens = np.asarray(request.tokens, dtype=np.int64)
        if request.max_nodes > 0:
            found, parents, matched = find_continuations(
                tokens, self.min_n, self.max_n, request.max_tokens, request.max_nodes, request.branching
            )
            if not found:
                return Draft([], stop_reason="no-match")
            return Draft(found, evidence=f"n{matched}", parents=parents)
        found, matched = find_continuation(tokens, self.min_n, self.max_n, request.max_tokens)
        if not found:
            return Draft([], stop_reason="no-match")
        return Draft(found, evidence=f"n{matched}")

    def observe(self, outcome: StepOutcome) -> None:
        pass

    def close(self) -> None:
        pass


def find_continuation(tokens: np.ndarray, min_n: int, max_n: int, max_tokens: int) -> tuple[list[int], int]:
    """(continuation, n): the tokens that followed an earlier occurrence of the longest matching
    suffix n-gram (the most recent occurrence followed by max_tokens tokens, else the earliest one),
    and n. ([], 0) when nothing matches.

    >>> find_continuation(np.array([5, 6, 7, 8, 5, 6]), 1, 3, 2)   # "5 6" occurred at 0, then 7 8
    ([7, 8], 2)
    """
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        hits = _matches(tokens, n)
        if hits.size:
            full = hits[hits + n + max_tokens <= length]
            start = int(full[-1] if full.size else hits[0]) + n
            return tokens[start : start + max_tokens].tolist(), n
    return [], 0


@dataclass
class _TrieNode:
    tier: int  # the n of the match whose continuations made this branch
    count: int = 0  # continuations passing through it
    recency: int = -1  # the latest of their starts
    children: dict[int, _TrieNode] = field(default_factory=dict)

    def rank(self) -> tuple[int, int, int]:
        return self.tier, self.count, self.recency


def _matches(tokens: np.ndarray, n: int) -> np.ndarray:
    """Starts of the earlier occurrences of the last n tokens, each followed by at least one token."""
    windows = sliding_window_view(tokens[: len(tokens) - 1], n)  # [length - n, n]
    return np.flatnonzero((windows == tokens[len(tokens) - n :]).all(axis=1))


def find_continuations(
    tokens: np.ndarray, min_n: int, max_n: int, depth: int, budget: int, topk: int
) -> tuple[list[int], list[int], int]:
    """(nodes, parents, n): a tree of what followed the earlier occurrences of the longest matching
    suffix n-gram, at most `budget` nodes, `depth` deep and `topk` children per node; ([], [], 0)
    when nothing matches.

    Every occurrence's continuation (up to `depth` tokens) goes into a trie whose nodes count the
    occurrences through them and remember the latest. Until the root has `topk` children, the shorter
    n-grams' other first tokens join as further branches of the root, after the longer ones'. Nodes
    come out best first (parents before children): a branch of a longer n-gram before one of a
    shorter, then by path share (the product of count / parent's count), then by recency.

    >>> find_continuations(np.array([4, 5, 6, 4, 5, 7, 4, 5]), 1, 2, 2, 4, 2)   # "4 5" -> 7 4 | 6 4
    ([7, 4, 6, 4], [-1, 0, -1, 2], 2)
    """
    length = len(tokens)
    root = _TrieNode(tier=0)
    matched = 0
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        hits = _matches(tokens, n)
        if not hits.size:
            continue
        matched = matched or n
        for start in hits.tolist():
            continuation = tokens[start + n : start + n + depth].tolist()
            if n < matched and continuation[0] in root.children:
                continue  # a shorter match only adds first tokens the longer one did not see
            root.count += 1
            node = root
            for token in continuation:
                node = node.children.setdefault(token, _TrieNode(tier=n))
                node.count, node.recency = node.count + 1, max(node.recency, start)
        if len(root.children) >= topk:
            break
    nodes: list[int] = []
    parents: list[int] = []
    # (-tier, -share, -recency, order, trie node, share, parent index): best first from a heap
    frontier: list[tuple] = []
    order = 0

    def push_children(node: _TrieNode, share: float, index: int) -> None:
        nonlocal order
        ranked = sorted(node.children.items(), key=lambda item: item[1].rank(), reverse=True)[:topk]
        for token, child in ranked:
            child_share = share * child.count / node.count
            heapq.heappush(
                frontier, (-child.tier, -child_share, -child.recency, order, token, child, child_share, index)
            )
            order += 1

    push_children(root, 1.0, -1)
    while frontier and len(nodes) < budget:
        *_, token, child, share, parent = heapq.heappop(frontier)
        nodes.append(token)
        parents.append(parent)
        push_children(child, share, len(nodes) - 1)
    return nodes, parents, matched


@dataclass(frozen=True)
class NgramOptions:
    ngram_min: int = option(1, "shortest n-gram to match", ge=1, le=16, label="shortest n-gram")
    ngram_max: int = option(4, "longest n-gram to match", ge=1, le=16, label="longest n-gram")

    def __post_init__(self) -> None:
        if self.ngram_min > self.ngram_max:
            raise SpecScopeError(
                f"ngram_min must be at most ngram_max, got ngram_min={self.ngram_min} and ngram_max={self.ngram_max}"
            )


def _export(draft_len: int, schedule: dict[int, int], options: NgramOptions) -> dict[str, object]:
    return {
        "vllm": {
            "method": "ngram",
            "num_speculative_tokens": draft_len,
            "prompt_lookup_min": options.ngram_min,
            "prompt_lookup_max": options.ngram_max,
        },
        "sglang": f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {draft_len + 1} "
        f"--speculative-ngram-min-match-window-size {options.ngram_min} "
        f"--speculative-ngram-max-match-window-size {options.ngram_max} --speculative-ngram-max-bfs-breadth 1",
        "tensorrt_llm": f"NGramDecodingConfig(max_draft_len={draft_len}, max_matching_ngram_size="
        f"{options.ngram_max}{trtllm_schedule_argument(schedule)})",
    }


SPEC = DrafterSpec(
    "ngram",
    "prompt lookup: copy what followed the last occurrence of the current n-gram",
    NgramOptions,
    lambda target, options, load: NgramDrafter(target.tle_per_forward, options.ngram_min, options.ngram_max),
    export=_export,
    trees=True,
)
