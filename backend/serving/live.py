"""Live runs: the lanes of one request decoded together, token for token (the lane furthest behind
takes the next step), each streamed as it goes and stored in batches, with running figures for the live
view and a summary at the end.

Every figure compares like with like, within the job:
  - the speedup divides by plain decoding of the same prompt and settings measured in this job
    (plain.py says how, and why interleaved), with the time it was measured;
  - each lane's output is checked token by token against that plain run;
  - each lane drafts with its own drafter state: a drafter with memory across requests (suffix's
    global tree) is forked for every lane at the start of the job, so all lanes start from the same
    snapshot and none sees another's output; what the lanes decoded joins the worker's drafter after
    the job (an output several lanes share, as greedy lanes of one prompt do, once), so the next job
    starts warmer, and its start record says how warm.

Records (each a dict with a `type`):
  start     {run_id, lane, target facts, drafter, draft_len, tree_budget, min_confidence, compile (the passes), cost,
             group_id, memory: {sequences, tokens} the drafter remembered at the start of the job, or None}
  step      {run_id, lane, turn, StepEvent fields (a tree step's parents and accepted_path included),
             *_text (decoded tokens), running (AL, rate, tok/s)}
  baseline  {run_id, tokens_per_s, measured_at, how}   plain decoding of the prompt, in this job
  summary   {run_id, lane, metrics summary, text, output_ids, finish_reason, speedup,
             baseline_tokens_per_s, baseline_measured_at, baseline_how,
             identity: plain.identity's dict, or None (no baseline, or the lane is the baseline)}

Knows nothing about HTTP, about loading models (the dispatcher hands it the target) or sweeps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from backend.core import metrics
from backend.core.drafter import Drafter, RemembersRequests
from backend.core.engine import StepEvent
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.lab.recorder import RunRecorder
from backend.lab.runner import Runner, RunResult, TurnResult
from backend.lab.store import RunStore
from backend.serving.jobs import Job, JobCancelled
from backend.serving.model_cache import ModelCache
from backend.serving.plain import (
    INTERLEAVED,
    PLAIN_LANE_BASELINE,
    Baseline,
    identity,
    identity_expected,
    measured_now,
    plain_rollout,
    step_record,
)
from backend.serving.run_request import PLAIN_LANE, LaneSpec, RunRequest

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
    """One lane in flight: its run id, its event stream, running figures and unsaved steps.
    index None: the hidden plain lane that measures the job's baseline (stored, not streamed)."""

    index: int | None
    spec: LaneSpec
    run_id: str
    events: Iterator
    source: Drafter | None = None  # the worker's drafter this lane's was forked from, if it remembers
    drafter: Drafter | None = None  # the drafter this lane decodes with
    running: RunningFigures = field(default_factory=RunningFigures)
    unsaved: list[dict] = field(default_factory=list)
    last_flush: float = field(default_factory=time.perf_counter)
    turns: list[TurnResult] = field(default_factory=list)
    ended_at: str | None = None
    tokens: int = 0  # tokens emitted so far: the lane with the fewest takes the next step


class LiveRuns:
    """Runs a generate or compare request's lanes on a loaded target (on the compute thread)."""

    def __init__(self, models: ModelCache, store: RunStore) -> None:
        self.models = models
        self.store = store

    def run(self, job: Job, target: LoadedModel) -> None:
        request: RunRequest = job.request
        recorder = RunRecorder(self.store, target, request.target)
        group_id = uuid.uuid4().hex  # the job's runs (lanes and plain baseline) share a group
        runs: list[LaneRun] = []
        try:
            runner = Runner(target)
            baseline = plain_rollout(job, runner, recorder, request, group_id) if request.replay else None
            reference = baseline.output_ids if baseline else None
            for index, spec in enumerate(request.lanes):
                runs.append(self._open_lane(job, runner, recorder, request, index, spec, reference, group_id))
            lanes = list(runs)
            if request.baseline and baseline is None and not any(lane.spec.is_plain for lane in lanes):
                runs.append(self._open_plain_lane(runner, recorder, request, group_id))
            self._interleave(job, runner, recorder, runs)
            if request.baseline and baseline is None:
                baseline = self._measured_baseline(job, recorder, runs)
            for lane in lanes:
                self._finish_lane(job, runner, recorder, request, lane, baseline)
            self._learn(lanes)
        except SpecScopeError as error:
            recorder.fail([run.run_id for run in runs], str(error))
            job.emit({"type": "error", "message": str(error)})
        except JobCancelled:
            raise
        except Exception as error:
            recorder.fail([run.run_id for run in runs], f"{type(error).__name__}: {error}")
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
        group_id: str,
    ) -> LaneRun:
        """Start a lane with a drafter of its own: a fork of the worker's when that one remembers requests."""
        source = self.models.drafter(request.target, spec.drafter, spec.options)
        remembers = isinstance(source, RemembersRequests)
        drafter = source.fork() if remembers else source
        compare = len(request.lanes) > 1
        kind = "replay" if reference is not None else ("compare" if compare else "generate")
        run_id = recorder.start(request.plan(spec, kind, group_id, index if compare else None))
        events = runner.stream(request.turns, drafter, request.settings(spec), reference)
        job.emit(
            {
                "type": "start",
                "run_id": run_id,
                "lane": index,
                "target": request.target,
                "facts": runner.target.facts.to_dict(),
                "drafter": spec.drafter,
                "draft_len": spec.draft_len,
                "tree_budget": spec.tree_budget,
                "min_confidence": spec.min_confidence,
                "compile": runner.engine.compile,
                "cost": drafter.cost().to_dict() if drafter else None,
                "group_id": group_id,
                "memory": source.memory() if remembers else None,
            }
        )
        return LaneRun(index, spec, run_id, events, source if remembers else None, drafter)

    def _open_plain_lane(self, runner: Runner, recorder: RunRecorder, request: RunRequest, group_id: str) -> LaneRun:
        """The hidden plain lane: the job's baseline, stepped in turn with the lanes."""
        run_id = recorder.start(request.plan(PLAIN_LANE, "baseline", group_id))
        return LaneRun(None, PLAIN_LANE, run_id, runner.stream(request.turns, None, request.settings(PLAIN_LANE)))

    def _interleave(self, job: Job, runner: Runner, recorder: RunRecorder, lanes: list[LaneRun]) -> None:
        """Advance the lanes together, token for token: the lane that has emitted the fewest tokens takes
        the next step (the first listed on a tie), so every lane, the hidden plain one included, is at
        the same point of the text at the same time and they finish together. A change of machine load
        then falls on them alike; one step of each in turn would leave the plain lane decoding alone
        for most of its steps once a lane with AL 3 had finished."""
        active = list(lanes)
        try:
            while active:
                job.check()
                lane = min(active, key=lambda candidate: candidate.tokens)
                item = next(lane.events, None)
                if item is None:
                    active.remove(lane)
                    lane.ended_at = measured_now()
                elif isinstance(item[1], TurnResult):
                    lane.turns.append(item[1])
                else:
                    lane.tokens += len(item[1].emitted)
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
        if lane.index is not None:
            running = lane.running.add(event)
            job.emit({"type": "step", "run_id": lane.run_id, "lane": lane.index, **record, "running": running})
        if len(lane.unsaved) >= FLUSH_EVERY_STEPS or time.perf_counter() - lane.last_flush > FLUSH_EVERY_S:
            self._flush(recorder, lane)

    def _flush(self, recorder: RunRecorder, lane: LaneRun) -> None:
        recorder.add_steps(lane.run_id, lane.unsaved)
        lane.unsaved = []
        lane.last_flush = time.perf_counter()

    def _measured_baseline(self, job: Job, recorder: RunRecorder, runs: list[LaneRun]) -> Baseline:
        """The baseline decoded alongside the lanes: the hidden plain lane (stored now), else the
        request's first plain lane (stored with the other lanes); emits its `baseline` record."""
        plain = next((run for run in runs if run.index is None), None)
        if plain is not None:
            self._flush(recorder, plain)
            speed = recorder.finish_turns(plain.run_id, plain.turns, own_baseline=True)["tokens_per_s"]
            how = INTERLEAVED
        else:
            plain = next(run for run in runs if run.spec.is_plain)
            speed = RunResult(plain.turns).summary()["tokens_per_s"]
            how = PLAIN_LANE_BASELINE
        output = [turn.output_ids for turn in plain.turns]
        baseline = Baseline(plain.run_id, speed, output, plain.ended_at or measured_now(), how)
        job.emit(baseline.record())
        return baseline

    def _finish_lane(
        self,
        job: Job,
        runner: Runner,
        recorder: RunRecorder,
        request: RunRequest,
        lane: LaneRun,
        baseline: Baseline | None,
    ) -> None:
        """Store the lane's figures with the job's baseline and emit its summary, with the check of
        its output against the plain run's."""
        self._flush(recorder, lane)
        own = baseline is not None and baseline.run_id == lane.run_id
        speed = baseline.tokens_per_s if baseline else None
        figures = recorder.finish_turns(lane.run_id, lane.turns, speed, own_baseline=own)
        output = [turn.output_ids for turn in lane.turns]
        checked = (
            identity(baseline.output_ids, output, runner.target.tokenizer.decode, identity_expected(request, lane.spec))
            if baseline and not own
            else None
        )
        job.emit(
            {
                "type": "summary",
                "run_id": lane.run_id,
                "lane": lane.index,
                **figures,
                "baseline_tokens_per_s": speed,
                "baseline_measured_at": baseline.measured_at if baseline else None,
                "baseline_how": baseline.how if baseline else None,
                "speedup": metrics.speedup(figures["tokens_per_s"], speed) if speed else None,
                "identity": checked,
                "text": "\n\n".join(t.text for t in lane.turns),
                "output_ids": [i for ids in output for i in ids],
                "finish_reason": lane.turns[-1].finish_reason if lane.turns else None,
            }
        )

    def _learn(self, lanes: list[LaneRun]) -> None:
        """After the job: what each lane's fork learnt joins the drafter it was forked from, an output
        that several lanes share once."""
        taken: set[tuple[int, tuple[int, ...]]] = set()
        for lane in lanes:
            if lane.source is None:
                continue
            for output in lane.drafter.learned():
                key = (id(lane.source), tuple(output))
                if key not in taken:
                    taken.add(key)
                    lane.source.learn(output)
