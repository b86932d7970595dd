"""The session shared by drafters that run a language model token by token with their own KV cache
(an external draft model, or the target's first layers for layer-skip self-speculation).

Each proposal first brings the draft cache in line with the committed sequence (keep the longest
common prefix, feed the rest; rejected drafts are simply cut away), then drafts D tokens one
forward at a time, sampling with the target's temperature / top-k / top-p so that q is the exact
distribution each draft was drawn from. Greedy drafting takes the argmax. Drafting stops early at
an end-of-sequence token. Asked for a tree, it drafts the greedy chain and adds each depth's next-best
tokens beside it (tree_growth.py): still one forward per depth, no tree attention in the draft's pass.

A draft model holding its weights in float16 (head_precision.py) does not check each product; a pass that
went beyond float16's range leaves a NaN or +inf in its logits, which each draft step checks once. The draft
ends before that token and the session drafts nothing more for its request (stop reason "overflow"): its
cache holds the overflowed keys and values, and the target decodes on alone, so the output is unchanged.

Knows nothing about acceptance; `DraftRunner` hides which model does the forward passes.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from backend.core.drafter import Draft, DraftRequest, StepOutcome, confident_length
from backend.core.kv import ForwardResult
from backend.core.verify import sample, target_probs
from backend.drafters.tree_growth import chain_and_siblings

OVERFLOW = "overflow"  # the stop reason of a draft cut by an overflowed pass, and of the request's later ones


class DraftRunner(Protocol):
    vocab_size: int  # the target's vocabulary: q rows are this wide

    def new_cache(self): ...

    def forward(self, tokens: list[int], cache) -> ForwardResult:
        """Feed tokens on top of the cache; logits for (at least) the last position."""
        ...

    def keep(self, cache, keep: int) -> None:
        """Forget every cached position from `keep` on."""
        ...


class AutoregressiveSession:
    def __init__(self, runner: DraftRunner, eos_ids: set[int]) -> None:
        self.runner = runner
        self.eos_ids = eos_ids
        self.cache = runner.new_cache()
        self.cached: list[int] = []  # the token ids whose keys/values the draft cache holds
        self.overflowed = False  # a pass went beyond its weights' dtype: nothing more is drafted

    def propose(self, request: DraftRequest) -> Draft:
        if self.overflowed:
            return Draft([], stop_reason=OVERFLOW)
        if request.max_nodes > 0:
            return self._tree(request)
        sampling = request.sampling
        feed = self._sync(request.tokens)
        drafted: list[int] = []
        rows: list[torch.Tensor] = []  # q for each draft, [V]
        confidence: list[float] = []
        while len(drafted) < request.max_tokens:
            logits = self._next_logits(feed)  # [V]
            if logits is None:
                break
            if sampling.greedy:
                token = int(logits.argmax())
                confidence.append(float(torch.softmax(logits, dim=-1)[token]))
            else:
                q = target_probs(logits[None], sampling)[0]  # [V]
                token = sample(q, request.generator)
                rows.append(q)
                confidence.append(float(q.max()))  # not q[token]: see Draft.confidence
            drafted.append(token)
            if token in self.eos_ids or confident_length(confidence, request.min_confidence) < len(drafted):
                break  # an unconfident token is cut by the engine: drafting past it would be wasted
            feed = [token]
        probs = torch.stack(rows) if rows else None  # [D, V]
        return Draft(drafted, probs=probs, confidence=confidence, stop_reason=self._stop_reason(drafted, request))

    def _tree(self, request: DraftRequest) -> Draft:
        """The greedy chain (whatever the sampling settings: tree nodes are deterministic picks) with each
        depth's next-best tokens beside it, the budget's best nodes kept (tree_growth.chain_and_siblings).
        A node deeper than the budget could not keep its ancestors, so the chain stops there too."""
        feed = self._sync(request.tokens)
        chain: list[int] = []
        rows: list[torch.Tensor] = []  # the draft's distribution at each depth, [V]
        while len(chain) < min(request.max_tokens, request.max_nodes):
            logits = self._next_logits(feed)  # [V]
            if logits is None:
                break
            chain.append(int(logits.argmax()))
            rows.append(torch.softmax(logits.float(), dim=-1))
            if chain[-1] in self.eos_ids:
                break
            feed = chain[-1:]
        if not chain:
            return Draft([], stop_reason=self._stop_reason(chain, request))
        tree = chain_and_siblings(torch.stack(rows), chain, request.branching, request.max_nodes)  # rows [n, V]
        return tree.draft(self._stop_reason(chain, request))

    def _stop_reason(self, drafted: list[int], request: DraftRequest) -> str | None:
        """Why the chain ended before max_tokens: an overflowed pass, or an end-of-sequence token."""
        if self.overflowed:
            return OVERFLOW
        return "eos" if drafted and drafted[-1] in self.eos_ids and len(drafted) < request.max_tokens else None

    def _sync(self, tokens: list[int]) -> list[int]:
        """Keep the cache's longest common prefix with the committed sequence; the tokens still to feed."""
        keep = min(_common_prefix(self.cached, tokens), len(tokens) - 1)  # feed at least the newest token
        self.runner.keep(self.cache, keep)
        self.cached = self.cached[:keep]
        return tokens[keep:]

    def _next_logits(self, feed: list[int]) -> torch.Tensor | None:
        """Feed tokens on top of the cache; the draft's logits for the next token, [V]; None once a pass
        overflowed (a NaN or +inf among them: -inf marks tokens outside a draft vocabulary)."""
        logits = self._fit_vocab(self.runner.forward(feed, self.cache).logits[-1])  # [V]
        self.cached.extend(feed)
        if not math.isfinite(float(logits.max())):
            self.overflowed = True
            return None
        return logits

    def observe(self, outcome: StepOutcome) -> None:
        pass  # the next proposal re-synchronises the cache with the committed sequence

    def close(self) -> None:
        self.cache = None
        self.cached = []

    def _fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [V_draft] -> [V_target]: extra (padding) rows dropped, missing ones at -inf."""
        size = self.runner.vocab_size
        if logits.shape[-1] >= size:
            return logits[:size]
        return torch.nn.functional.pad(logits, (0, size - logits.shape[-1]), value=float("-inf"))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
