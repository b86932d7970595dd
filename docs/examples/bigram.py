"""Bigram drafting, the README's example of adding a drafter: propose the token that most often followed
the newest token so far in this request (prompt + output), then the one that most often followed that,
and so on. No model; drafts are deterministic (q one-hot).

Copy this file to backend/drafters/bigram.py and add the line `"bigram",` to REGISTRY in
backend/drafters/__init__.py: the CLI (`--drafter bigram --bigram-min-count N`), the worker, the
dashboard and the losslessness tests then know it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import torch

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.drafters.spec import DrafterSpec, option


class BigramDrafter:
    name = "bigram"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = True

    def __init__(self, target_tle_per_forward: float, min_count: int) -> None:
        self.target_tle_per_forward = target_tle_per_forward
        self.min_count = min_count

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, self.target_tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> BigramSession:
        return BigramSession(prompt, self.min_count)


class BigramSession:
    def __init__(self, prompt: list[int], min_count: int) -> None:
        self.followers: dict[int, Counter[int]] = defaultdict(Counter)  # token -> counts of the next token
        self.min_count = min_count
        self._count(prompt)

    def _count(self, tokens: list[int]) -> None:
        for first, second in zip(tokens, tokens[1:], strict=False):
            self.followers[first][second] += 1

    def propose(self, request: DraftRequest) -> Draft:
        drafted, last = [], request.tokens[-1]
        while len(drafted) < request.max_tokens and self.followers[last]:
            last, count = self.followers[last].most_common(1)[0]
            if count < self.min_count:
                break
            drafted.append(last)
        return Draft(drafted, stop_reason=None if drafted else "no-match")

    def observe(self, outcome: StepOutcome) -> None:
        self._count(outcome.committed)  # (the pair across the step boundary is left out, for brevity)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class BigramOptions:
    bigram_min_count: int = option(
        1, "draft a follower only if seen at least this often", ge=1, le=64, label="minimum count"
    )


SPEC = DrafterSpec(
    "bigram",
    "the most frequent follower of the newest token, repeatedly",
    BigramOptions,
    lambda target, options, load: BigramDrafter(target.tle_per_forward, options.bigram_min_count),
)
