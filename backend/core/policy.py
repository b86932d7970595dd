"""How many drafted tokens to verify at each step: a fixed D, or `auto`.

`auto` keeps a cap on D that doubles after a step that accepted every draft and falls to one more
than what was accepted after a rejection, bounded by [2, d_max]. Below the cap it verifies the number
of drafts k that maximises the expected tokens per second on this hardware:

    E[tokens | k] = 1 + p1 * (1 + r + ... + r^(k-1))   (the target's own token + expected accepted drafts)
    k* = argmax_k  E[tokens | k] / t(k)                  k = 0 is plain decoding

where t(k) is the measured time of a step that verified k drafts (drafting included; an unmeasured k
read off the line through the measured ones), p1 the
acceptance rate of a first draft token and r that of each later one given the previous was accepted
(a geometric model of acceptance, as in Leviathan et al. §3). p1 is kept per "evidence" label the
drafter attaches to a draft (e.g. how many tokens of context its match covered), so weak matches
stop costing time while strong ones are verified in full. All estimates are decayed counts, so the
policy follows the text as it moves between copying and free writing. A costly drafter's step is
scored by what it was asked for, since asking is the decision: a drafter may stop sooner (DSpark's
confidence head, a confidence stop on a chain), and such a step's time is the time of asking for k
drafts (not of a plain step, nor of a shorter draft), and the drafts it did not return count as rejected.
t(k) and the acceptance rates are then both averages over what asking for k gives.

This matters most on a CPU, where verifying 2 tokens already costs far more than verifying 1. A free
drafter (table lookup) proposes every step, verified or not, and its unverified first token is scored
against the token the target produced, so the policy notices when drafts start matching again; a
costly drafter is probed for real every `probe_every` plain steps instead.

It knows nothing about models or drafters beyond those numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from backend.core.errors import SpecScopeError

MAX_DRAFT_LEN = 64


@dataclass(frozen=True)
class StepObservation:
    """What a step did, as a policy learns from it."""

    verified: int  # drafts verified (0 = a plain step)
    accepted: int
    seconds: float  # drafting + verification
    evidence: str | None  # the drafter's label for this draft
    first_matched: bool | None  # did the first draft equal the target's token (verified or not); None: no draft
    asked: int = 0  # drafts a costly drafter was asked for; it may stop sooner (low confidence)


class DraftLengthPolicy(Protocol):
    label: str
    cap: int  # the most drafts the policy may verify next step: what a drafter is asked for

    def choose(self, available: int, evidence: str | None) -> int:
        """How many of `available` drafted tokens to verify (0 = a plain step)."""
        ...

    def observe(self, step: StepObservation) -> None:
        """What a step did."""
        ...


class FixedDraftLength:
    def __init__(self, draft_len: int) -> None:
        self.cap = draft_len
        self.label = str(draft_len)

    def choose(self, available: int, evidence: str | None) -> int:
        return min(self.cap, available)

    def observe(self, step: StepObservation) -> None:
        pass


class DecayedRate:
    """successes / trials with old observations fading by `decay` per update; starts at prior."""

    def __init__(self, prior: float, decay: float, prior_weight: float = 2.0) -> None:
        self.successes = prior * prior_weight
        self.trials = prior_weight
        self.decay = decay

    @property
    def value(self) -> float:
        return self.successes / self.trials

    def add(self, successes: int, trials: int) -> None:
        self.successes = self.decay * self.successes + successes
        self.trials = self.decay * self.trials + trials


class AdaptiveDraftLength:
    label = "auto"

    def __init__(
        self, free_drafter: bool, d_max: int = 32, d_start: int = 4, decay: float = 0.8, probe_every: int = 16
    ) -> None:
        self.free_drafter = free_drafter
        self.d_max = d_max
        self.cap = min(d_start, d_max)
        self.decay = decay
        self.probe_every = probe_every
        self.first: dict[str | None, DecayedRate] = {}  # p1 per evidence label
        self.later = DecayedRate(prior=0.5, decay=decay)  # r
        self.step_seconds: dict[int, float] = {}  # drafts verified -> smoothed seconds per step
        self.plain_steps_in_a_row = 0

    def choose(self, available: int, evidence: str | None) -> int:
        available = min(available, self.cap)
        if available == 0:
            return 0
        if not self.free_drafter and self.plain_steps_in_a_row >= self.probe_every:
            return available  # a costly drafter cannot shadow-draft: probe it for real now and then
        plain = self.step_seconds.get(0)
        if plain is None:
            return 0  # measure a plain step first: every decision compares against it
        if not any(k > 0 for k in self.step_seconds):
            return available  # drafting not measured yet: try it
        p1 = self._first_rate(evidence).value
        r = min(self.later.value, 0.999)
        best_k, best_rate = 0, 1.0 / plain
        for k in range(1, available + 1):
            expected_tokens = 1.0 + p1 * (1.0 - r**k) / (1.0 - r)
            rate = expected_tokens / self._seconds_for(k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def observe(self, step: StepObservation) -> None:
        accepted, evidence = step.accepted, step.evidence
        tried = max(step.asked, step.verified)  # a costly drafter's ask, however much of it came back
        self._time(tried, step.seconds)
        if step.first_matched is not None:
            self._first_rate(evidence).add(int(step.first_matched), 1)
        elif step.asked:  # paid for drafting, stopped before its first token: a first draft not accepted
            self._first_rate(evidence).add(0, 1)
        if tried == 0:
            self.plain_steps_in_a_row += 1
            return
        self.plain_steps_in_a_row = 0
        if accepted >= 1:  # positions 2..tried, each tried only if the one before it was accepted
            rejected = accepted < tried  # a draft that was not returned is one not accepted
            self.later.add(accepted - 1, accepted - 1 + int(rejected))
        if accepted == tried:
            self.cap = min(self.d_max, 2 * self.cap)
        else:
            self.cap = max(2, accepted + 1)

    def _time(self, draft_len: int, seconds: float) -> None:
        previous = self.step_seconds.get(draft_len)
        self.step_seconds[draft_len] = seconds if previous is None else 0.7 * previous + 0.3 * seconds

    def _first_rate(self, evidence: str | None) -> DecayedRate:
        if evidence not in self.first:
            self.first[evidence] = DecayedRate(prior=0.5, decay=self.decay)
        return self.first[evidence]

    def _seconds_for(self, draft_len: int) -> float:
        """Measured step time at this k, else read off a line, as a step's time grows about linearly with the
        drafts it verifies (and, for a costly drafter, drafts): between the nearest measured k below and above
        it (the plain step's k = 0 included), or past the largest measured k along the line through the two
        largest (never falling). Reading an unmeasured k off its nearest neighbour instead made every k up to
        a measured one look as costly as it, so a shorter draft was never tried where it would pay."""
        if draft_len in self.step_seconds:
            return self.step_seconds[draft_len]
        known = sorted(self.step_seconds)
        below, above = [k for k in known if k < draft_len], [k for k in known if k > draft_len]
        low, high = (below[-1], above[0]) if below and above else (known[-2], known[-1])
        slope = (self.step_seconds[high] - self.step_seconds[low]) / (high - low)
        if not above:
            slope = max(slope, 0.0)
        return self.step_seconds[low] + (draft_len - low) * slope


class ScheduledDraftLength:
    """D chosen by how many sequences decode together: the entry of the largest batch size not above the
    current one (0 turns drafting off). TensorRT-LLM's `draft_len_schedule` reads its keys the other way
    round (upper bounds); backend/drafters/engine_settings.py converts for its export."""

    label = "schedule"

    def __init__(self, table: dict[int, int], batch_size: Callable[[], int]) -> None:
        self.table = dict(sorted(table.items()))
        self.batch_size = batch_size

    @property
    def cap(self) -> int:
        size = self.batch_size()
        fitting = [d for b, d in self.table.items() if b <= size]
        return fitting[-1] if fitting else next(iter(self.table.values()))

    def choose(self, available: int, evidence: str | None) -> int:
        return min(self.cap, available)

    def observe(self, step: StepObservation) -> None:
        pass


def parse_schedule(text: str) -> dict[int, int]:
    """'schedule:1=8/4=4/16=2' (or with commas) -> {1: 8, 4: 4, 16: 2}: batch size = D."""
    try:
        pairs = [part.split("=") for part in text.removeprefix("schedule:").replace("/", ",").split(",")]
        table = {int(size): int(d) for size, d in pairs}
    except ValueError as error:
        raise SpecScopeError(f"a schedule looks like schedule:1=8/4=4/16=2 (batch size=D), got {text!r}") from error
    if not table or any(size < 1 or not 0 <= d <= MAX_DRAFT_LEN for size, d in table.items()):
        raise SpecScopeError(f"schedule entries need batch size >= 1 and 0 <= D <= {MAX_DRAFT_LEN}, got {text!r}")
    return table


def make_policy(
    draft_len: int | str, free_drafter: bool, batch_size: Callable[[], int] = lambda: 1
) -> DraftLengthPolicy:
    """`draft_len` is an int D (0 = plain decoding), "auto", or "schedule:B=D/..." (D by batch size)."""
    if draft_len == "auto":
        return AdaptiveDraftLength(free_drafter=free_drafter)
    if isinstance(draft_len, str) and draft_len.startswith("schedule:"):
        return ScheduledDraftLength(parse_schedule(draft_len), batch_size)
    try:
        value = int(draft_len)
    except (TypeError, ValueError) as error:
        raise SpecScopeError(
            f"draft length must be an integer 0..{MAX_DRAFT_LEN} or 'auto', got {draft_len!r}"
        ) from error
    if not 0 <= value <= MAX_DRAFT_LEN:
        raise SpecScopeError(f"draft length must be between 0 and {MAX_DRAFT_LEN} (or 'auto'), got {value}")
    return FixedDraftLength(value)
