"""Live runs: the lanes of one request decoded together, one step of each in turn, each streamed as
it goes and stored in batches, with running figures for the live view and a summary at the end.

Records (each a dict with a `type`):
  start     {run_id, lane?, target facts, drafter, draft_len, cost, prompt_tokens}
  step      {run_id, lane?, turn, StepEvent fields, *_text (decoded tokens), running (AL, rate, tok/s)}
  baseline  {run_id, tokens_per_s}          the plain run of the same prompt, stored or measured now
  summary   {run_id, lane?, metrics summary, text, output_ids, speedup, finish_reason}

Knows nothing about HTTP, about loading models (the dispatcher hands it the target) or sweeps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from backend.core import metrics
from backend.core.engine import StepEvent
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.lab.recorder import RunRecorder
from backend.lab.runner import Runner, TurnResult
from backend.lab.store import RunStore
from backend.serving.jobs import Job, JobCancelled
from backend.serving.model_cache import ModelCache
from backend.serving.plain import baseline_tokens_per_s, plain_run, step_record
from backend.serving.run_request import LaneSpec, RunRequest

FLUSH_EVERY_STEPS = 64  # steps reach the store in batches, at least this often ...
FLUSH_EVERY_S = 2.0  # ... and within this many seconds


@dataclass
class RunningFigures:
    """AL, acceptance rate and tokens/s so far, for the live view (metrics.py's counter)."""

    acceptance: metrics.AcceptanceCounter = field(default_factory=metrics.AcceptanceCounter)
    seconds: float = 0.0
    tokens: int = 0

    def add(self, event: StepEvent) -> dict:
        self.acceptance.add_step(event)
        self.seconds += event.draft_s + event.verify_s
        self.tokens += len(event.emitted)
        stats = self.acceptance.stats()
        return {
            "al": stats.al,
            "acceptance_rate": stats.acceptance_rate,
            "tokens_per_s": self.tokens / self.seconds if self.seconds > 0 else 0.0,
            "new_tokens": self.tokens,
        }


@dataclass
class LaneRun:
    """One lane in flight: its run id, its event stream, running figures and unsaved steps."""

    index: int
    spec: LaneSpec
    run_id: str
    events: Iterator
    running: RunningFigures = field(default_factory=RunningFigures)
    unsaved: list[dict] = field(default_factory=list)
    last_flush: float = field(default_factory=time.perf_counter)
    turns: list[TurnResult] = field(default_factory=list)


class LiveRuns:
    """Runs a generate or compare request's lanes on a loaded target (on the compute thread)."""

    def __init__(self, models: ModelCache, store: RunStore) -> None:
        self.models = models
        self.store = store

    def run(self, job: Job, target: LoadedModel) -> None:
        request: RunRequest = job.request
        recorder = RunRecorder(self.store, target, request.target)
        group_id = uuid.uuid4().hex if len(request.lanes) > 1 else None
        lanes: list[LaneRun] = []
        try:
            runner = Runner(target)
            reference = plain_run(job, runner, recorder, request).output_ids if request.replay else None
            for index, spec in enumerate(request.lanes):
                lanes.append(self._open_lane(job, runner, recorder, request, index, spec, reference, group_id))
            self._interleave(job, runner, recorder, lanes)
            for lane in lanes:
                self._finish_lane(job, runner, recorder, request, lane)
        except SpecScopeError as error:
            recorder.fail([lane.run_id for lane in lanes], str(error))
            job.emit({"type": "error", "message": str(error)})
        except JobCancelled:
            raise
        except Exception as error:
            recorder.fail([lane.run_id for lane in lanes], f"{type(error).__name__}: {error}")
            raise

    def _open_lane(
        self,
        job: Job,
        runner: Runner,
        recorder: RunRecorder,
        request: RunRequest,
        index: int,
        spec: LaneSpec,
        reference: list[list[int]] | None,
        group_id: str | None,
    ) -> LaneRun:
        drafter = self.models.drafter(request.target, spec.drafter, spec.options)
        kind = "replay" if reference is not None else ("compare" if group_id else "generate")
        run_id = recorder.start(request.plan(spec, kind, group_id, index if group_id else None))
        events = runner.stream(request.turns, drafter, request.settings(spec.draft_len), reference)
        job.emit(
            {
                "type": "start",
                "run_id": run_id,
                "lane": index,
                "target": request.target,
                "facts": runner.target.facts.to_dict(),
                "drafter": spec.drafter,
                "draft_len": spec.draft_len,
                "cost": drafter.cost().to_dict() if drafter else None,
                "group_id": group_id,
            }
        )
        return LaneRun(index, spec, run_id, events)

    def _interleave(self, job: Job, runner: Runner, recorder: RunRecorder, lanes: list[LaneRun]) -> None:
        """Advance every lane one step in turn, so lanes stream together."""
        active = list(lanes)
        try:
            while active:
                for lane in list(active):
                    job.check()
                    item = next(lane.events, None)
                    if item is None:
                        active.remove(lane)
                    elif isinstance(item[1], TurnResult):
                        lane.turns.append(item[1])
                    else:
                        self._on_step(job, runner, recorder, lane, *item)
        except JobCancelled:
            for lane in lanes:
                self._flush(recorder, lane)
                lane.events.close()
                recorder.cancel(lane.run_id)
            raise

    def _on_step(
        self, job: Job, runner: Runner, recorder: RunRecorder, lane: LaneRun, turn: int, event: StepEvent
    ) -> None:
        record = step_record(runner, turn, event)
        lane.unsaved.append(record)
        job.emit(
            {"type": "step", "run_id": lane.run_id, "lane": lane.index, **record, "running": lane.running.add(event)}
        )
        if len(lane.unsaved) >= FLUSH_EVERY_STEPS or time.perf_counter() - lane.last_flush > FLUSH_EVERY_S:
            self._flush(recorder, lane)

    def _flush(self, recorder: RunRecorder, lane: LaneRun) -> None:
        recorder.add_steps(lane.run_id, lane.unsaved)
        lane.unsaved = []
        lane.last_flush = time.perf_counter()

    def _finish_lane(self, job: Job, runner: Runner, recorder: RunRecorder, request: RunRequest, lane: LaneRun) -> None:
        """Store the lane's figures with its baseline (a plain lane is its own; a drafting lane's comes
        from the store or a plain run now, when the request wants one) and emit its summary."""
        self._flush(recorder, lane)
        if lane.spec.is_plain:
            figures = recorder.finish_turns(lane.run_id, lane.turns, own_baseline=True)
            baseline = figures["tokens_per_s"]
        else:
            baseline = baseline_tokens_per_s(job, runner, recorder, request) if request.baseline else None
            figures = recorder.finish_turns(lane.run_id, lane.turns, baseline)
        speedup = metrics.speedup(figures["tokens_per_s"], baseline) if baseline else None
        job.emit(
            {
                "type": "summary",
                "run_id": lane.run_id,
                "lane": lane.index,
                **figures,
                "baseline_tokens_per_s": baseline,
                "speedup": speedup,
                "text": "\n\n".join(t.text for t in lane.turns),
                "output_ids": [i for t in lane.turns for i in t.output_ids],
                "finish_reason": lane.turns[-1].finish_reason if lane.turns else None,
            }
        )
