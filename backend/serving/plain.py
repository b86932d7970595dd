"""Plain decoding of a live request's prompt (no drafter), stored as a `baseline` run: the one helper
behind both the replay reference (the rollout every lane is scored against) and the speed baseline
a speedup divides by; and the policy for that baseline (reuse a stored plain run of the same prompt
and settings, else measure one now). Also the step record that live and plain runs store alike.

Knows nothing about HTTP or lanes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from backend.core.engine import StepEvent
from backend.core.errors import SpecScopeError
from backend.lab.recorder import RunRecorder
from backend.lab.runner import Runner, TurnResult
from backend.serving.jobs import Job, JobCancelled
from backend.serving.run_request import PLAIN_LANE, RunRequest


@dataclass
class PlainRun:
    run_id: str
    turns: list[TurnResult]
    tokens_per_s: float

    @property
    def output_ids(self) -> list[list[int]]:
        """One target rollout per turn (what replay scores drafts against)."""
        return [turn.output_ids for turn in self.turns]


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


def plain_run(job: Job, runner: Runner, recorder: RunRecorder, request: RunRequest) -> PlainRun:
    """Decode the request's prompt plainly to the end without streaming its steps, store it as a
    `baseline` run (its own baseline), and emit {type: baseline, run_id, tokens_per_s}."""
    run_id = recorder.start(request.plan(PLAIN_LANE, "baseline"))
    try:
        turns = _drain(job, runner, recorder, run_id, runner.stream(request.turns, None, request.settings(0)))
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
    job.emit({"type": "baseline", "run_id": run_id, "tokens_per_s": speed})
    return PlainRun(run_id, turns, speed)


def baseline_tokens_per_s(job: Job, runner: Runner, recorder: RunRecorder, request: RunRequest) -> float:
    """Tokens/s of plain decoding of the same prompt and settings: a stored plain run's, else measured now."""
    target = runner.target
    stored = recorder.store.baseline_tokens_per_s(
        target.fingerprint,
        request.turns,
        request.max_new_tokens,
        request.sampling.temperature,
        str(target.device),
        recorder.compile,
    )
    return stored if stored is not None else plain_run(job, runner, recorder, request).tokens_per_s


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
