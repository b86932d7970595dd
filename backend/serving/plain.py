"""Plain decoding (no drafter) of a live request's prompt, measured in the same job as its lanes: the
baseline a speedup divides by, and the output each lane is checked against token by token.

Where the baseline comes from (live.py picks):
  - a plain lane the request asked for is the baseline itself (nothing more is decoded);
  - replay decodes the plain rollout before the lanes (they are scored against it), so that run,
    measured immediately before them, is the baseline;
  - otherwise one hidden plain lane is interleaved with the drafting lanes, token for token (the lane
    that has emitted the fewest tokens takes the next step, so a plain lane takes about AL steps for
    each step of a drafting lane and all finish together). Interleaving is the fairest order at no
    extra cost: a change of machine load during the job (another process, a cooling CPU) falls on
    the plain run and the lanes alike, where a plain run just before or after the lanes would miss
    it; and the plain decoding is done once per job whatever the order, shared by every lane.
A plain run stored earlier is never reused: it was measured at another time under other load.

Whether a lane's output should equal the plain run's token for token: with greedy decoding yes (the
acceptance rule keeps exactly the target's choices), and in replay yes (every lane is scored against
the plain rollout). When sampling (T > 0) no: speculative sampling is lossless in distribution, not
per token, because a lane draws its random numbers differently (one uniform per draft, then the
correction) from plain decoding with the same seed (one draw per token). Two plain lanes with the
same seed draw alike and do match.

Also the step record that live and plain runs store alike. Knows nothing about HTTP or lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from backend.core.engine import StepEvent
from backend.core.errors import SpecScopeError
from backend.lab.recorder import RunRecorder
from backend.lab.runner import Runner, TurnResult
from backend.serving.jobs import Job, JobCancelled
from backend.serving.run_request import PLAIN_LANE, LaneSpec, RunRequest

# how each kind of baseline was measured, as the dashboard says it
INTERLEAVED = "interleaved"  # a hidden plain lane interleaved with the lanes, token for token
BEFORE = "before"  # the replay rollout, decoded immediately before the lanes
PLAIN_LANE_BASELINE = "plain lane"  # the request's own plain lane


@dataclass
class Baseline:
    """Plain decoding of the request's prompt and settings, measured in this job."""

    run_id: str
    tokens_per_s: float
    output_ids: list[list[int]]  # one list per turn
    measured_at: str  # ISO 8601, UTC: when the plain decoding ended
    how: str  # INTERLEAVED, BEFORE or PLAIN_LANE_BASELINE

    def record(self) -> dict:
        """The `baseline` record streamed to the client."""
        return {
            "type": "baseline",
            "run_id": self.run_id,
            "tokens_per_s": self.tokens_per_s,
            "measured_at": self.measured_at,
            "how": self.how,
        }


def measured_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def step_record(runner: Runner, turn: int, event: StepEvent) -> dict:
    """A step as stored and streamed: the event, its turn, and each token decoded for display."""
    piece = runner.target.tokenizer.decode
    return {
        "turn": turn,
        **event.to_dict(),
        "drafted_text": [piece([t]) for t in event.drafted],
        "emitted_text": [piece([t]) for t in event.emitted],
        "target_text": piece([event.target_token]),
    }


def plain_rollout(job: Job, runner: Runner, recorder: RunRecorder, request: RunRequest, group_id: str) -> Baseline:
    """Decode the request's prompt plainly to the end without streaming its steps (replay's rollout),
    store it as a `baseline` run of the job's group, and emit its `baseline` record."""
    run_id = recorder.start(request.plan(PLAIN_LANE, "baseline", group_id))
    try:
        turns = _drain(job, runner, recorder, run_id, runner.stream(request.turns, None, request.settings(PLAIN_LANE)))
    except JobCancelled:
        recorder.cancel(run_id)
        raise
    except SpecScopeError as error:
        recorder.fail([run_id], str(error))
        raise
    except Exception as error:
        recorder.fail([run_id], f"{type(error).__name__}: {error}")
        raise
    speed = recorder.finish_turns(run_id, turns, own_baseline=True)["tokens_per_s"]
    baseline = Baseline(run_id, speed, [turn.output_ids for turn in turns], measured_now(), BEFORE)
    job.emit(baseline.record())
    return baseline


def identity_expected(request: RunRequest, lane: LaneSpec) -> bool:
    """Whether the lane's output must equal the plain run's token for token (module docstring)."""
    return request.sampling.greedy or request.replay or lane.is_plain


def first_difference(plain: Sequence[int], other: Sequence[int]) -> int | None:
    """The first index where two token lists differ (one ending earlier counts); None when equal.

    >>> first_difference([5, 6, 7], [5, 6, 8]), first_difference([5, 6], [5, 6, 1]), first_difference([5], [5])
    (2, 2, None)
    """
    for index, (a, b) in enumerate(zip(plain, other, strict=False)):
        if a != b:
            return index
    return None if len(plain) == len(other) else min(len(plain), len(other))


def identity(plain: list[list[int]], lane: list[list[int]], decode: Callable[[list[int]], str], expected: bool) -> dict:
    """Whether a lane's output (one list per turn) is token-identical to the plain run's, and where it
    first differs: {identical, expected, tokens, index, plain_token, plain_text, lane_token, lane_text};
    `index` counts output tokens over all turns, and a token is None where that output had ended."""
    plain_ids = [t for turn in plain for t in turn]
    lane_ids = [t for turn in lane for t in turn]
    index = first_difference(plain_ids, lane_ids)
    found = {"identical": index is None, "expected": expected, "tokens": len(lane_ids), "index": index}
    if index is not None:
        for side, ids in (("plain", plain_ids), ("lane", lane_ids)):
            token = ids[index] if index < len(ids) else None
            found[f"{side}_token"] = token
            found[f"{side}_text"] = decode([token]) if token is not None else None
    return found


def _drain(job: Job, runner: Runner, recorder: RunRecorder, run_id: str, events: Iterator) -> list[TurnResult]:
    turns, steps = [], []
    for turn, item in events:
        job.check()
        if isinstance(item, TurnResult):
            turns.append(item)
        else:
            steps.append(step_record(runner, turn, item))
    recorder.add_steps(run_id, steps)
    return turns
