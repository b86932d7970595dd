"""The counts serving engines keep about speculative decoding, as one record: drafting steps, drafted
tokens, accepted tokens and accepted tokens per draft position (vLLM's four spec-decode counters; other
engines report a subset). Engines keep running totals, so a measurement is the difference of two reads
(`minus`), taken with the server otherwise idle.

An engine's counters do not say how many drafts reached each position or the histogram of accepted
counts; `counter()` rebuilds both on the assumption engines make when they publish these counters: every
drafting step proposes the same number of tokens (vLLM's `num_speculative_tokens`), so the steps that
reached position k are those that accepted every earlier position. Knows nothing about HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.core.metrics import AcceptanceCounter


@dataclass(frozen=True)
class EngineCounts:
    drafts: int  # drafting steps
    drafted_tokens: int
    accepted_tokens: int
    accepted_per_position: list[int] = field(default_factory=list)  # index k: steps accepting position k + 1

    def minus(self, earlier: EngineCounts) -> EngineCounts:
        """What happened between an earlier read and this one; a counter that went down means the engine
        restarted in between, which no difference can measure."""
        width = max(len(self.accepted_per_position), len(earlier.accepted_per_position))
        mine = self.accepted_per_position + [0] * (width - len(self.accepted_per_position))
        theirs = earlier.accepted_per_position + [0] * (width - len(earlier.accepted_per_position))
        delta = EngineCounts(
            self.drafts - earlier.drafts,
            self.drafted_tokens - earlier.drafted_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
            [a - b for a, b in zip(mine, theirs, strict=True)],
        )
        if min(delta.drafts, delta.drafted_tokens, delta.accepted_tokens, *delta.accepted_per_position, 0) < 0:
            raise ValueError("the engine's counters went down between the two reads: was it restarted?")
        return delta

    def counter(self) -> AcceptanceCounter:
        """The counts as SpecScope's acceptance counter (AL, survival, conditional, histogram), with the
        reached-per-position counts and histogram rebuilt for fixed-length drafts (left empty where the
        engine does not count per position)."""
        accepted = self.accepted_per_position
        if not accepted:
            return AcceptanceCounter(self.drafts, self.drafted_tokens, self.accepted_tokens)
        at_least = [self.drafts, *accepted]  # index j: steps that accepted at least j drafts
        return AcceptanceCounter(
            drafts=self.drafts,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=list(accepted),
            reached_per_position=at_least[: len(accepted)],
            histogram=[at_least[j] - (at_least[j + 1] if j + 1 < len(at_least) else 0) for j in range(len(at_least))],
        )


@dataclass(frozen=True)
class ReplyAcceptance:
    """What an engine reports about one reply (SGLang's `meta_info`, llama.cpp's `timings`): tokens generated,
    target passes (verify steps) and, where reported, draft tokens proposed and accepted. Such engines do not
    count the steps that drafted, so the AL they give is tokens per target pass (the bonus token included),
    which equals vLLM's AL where every step drafts and is lower where some steps draft nothing."""

    generated: int
    target_passes: int
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None

    @property
    def tokens_per_pass(self) -> float:
        return self.generated / self.target_passes if self.target_passes else 1.0

    @property
    def acceptance_rate(self) -> float | None:
        if self.drafted_tokens is None or self.accepted_tokens is None:
            return None
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0
