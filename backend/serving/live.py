"""What the worker's compute thread does for a request: load the models, run the engine, stream one
record per step, write the run and its steps to the store, and measure the plain baseline.

Records (each a dict with a `type`):
  loading   {spec}                         a model is being loaded
  start     {run_id, lane?, target facts, drafter, draft_len, cost, prompt_tokens}
  step      {run_id, lane?, turn, StepEvent fields, *_text (decoded tokens), running (AL, rate, tok/s)}
  baseline  {run_id, tokens_per_s}          the plain run of the same prompt, stored or measured now
  summary   {run_id, lane?, metrics summary, text, output_ids, speedup, finish_reason}
  error     {message}                        a clear message; nothing else follows

Knows nothing about HTTP.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import transformers

from backend.core import metrics
from backend.core.engine import GenerationSettings, StepEvent
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.core.target_passes import compile_mode
from backend.core.verify import SamplingParams
from backend.drafters import DrafterOptions
from backend.lab.prompts import Question
from backend.lab.runner import Runner, RunResult, TurnResult
from backend.lab.store import RunStore
from backend.lab.sweep import SweepStopped, run_sweep
from backend.serving.jobs import Job, JobCancelled
from backend.serving.model_cache import ModelCache

FLUSH_EVERY_STEPS = 64  # steps reach the store in batches, at least this often ...
FLUSH_EVERY_S = 2.0  # ... and within this many seconds


@dataclass
class LaneSpec:
    drafter: str
    draft_len: int | str
    options: DrafterOptions


@dataclass
class RunRequest:
    turns: list[str]
    target: str
    lanes: list[LaneSpec]
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    stop: list[str] = field(default_factory=list)
    baseline: bool = True
    replay: bool = False
    question_id: str | None = None
    category: str | None = None


@dataclass
class LaneRun:
    """One lane in flight: its run id, its event stream and running counters."""

    index: int
    spec: LaneSpec
    run_id: str
    events: Iterator
    steps: list[StepEvent] = field(default_factory=list)
    totals: dict = field(default_factory=lambda: dict.fromkeys(
        ("drafting_steps", "accepted", "drafted", "seconds", "tokens"), 0))
    unsaved: list[dict] = field(default_factory=list)
    last_flush: float = field(default_factory=time.perf_counter)
    turns: list[TurnResult] = field(default_factory=list)


class LiveService:
    def __init__(self, models: ModelCache, store: RunStore, default_target: str = "default") -> None:
        self.models = models
        self.store = store
        self.default_target = default_target

    # -- entry points (compute thread) ------------------------------------------------------------

    def execute(self, job: Job) -> None:
        if job.kind == "sweep":
            self._sweep(job)
            return
        request: RunRequest = job.request
        group_id = uuid.uuid4().hex if len(request.lanes) > 1 else None
        lanes: list[LaneRun] = []
        try:
            target = self._load(job, request.target)
            runner = Runner(target)
            reference = self._reference(job, runner, request) if request.replay else None
            for index, spec in enumerate(request.lanes):
                lanes.append(self._open_lane(job, runner, request, index, spec, reference, group_id))
            self._interleave(job, runner, lanes)
            for lane in lanes:
                self._finish_lane(job, runner, request, lane)
        except SpecScopeError as error:
            self._fail(lanes, str(error))
            job.emit({"type": "error", "message": str(error)})
        except JobCancelled:
            raise
        except Exception as error:
            self._fail(lanes, f"{type(error).__name__}: {error}")
            raise

    def _sweep(self, job: Job) -> None:
        """A sweep as one job: progress records as it goes, then {type: sweep, report}."""
        body = job.request
        try:
            target = self._load(job, body.target or self.default_target)
        except SpecScopeError as error:
            job.emit({"type": "error", "message": str(error)})
            return
        questions = [Question(q.question_id, q.category, tuple(q.turns)) for q in body.questions]

        def progress(label: str, done: int, total: int) -> None:
            if job.cancelled.is_set():
                raise SweepStopped
            job.emit({"type": "progress", "label": label, "done": done, "total": total})

        try:
            report = run_sweep(target, questions, body.drafters, body.draft_lens, body.batch_sizes,
                               body.max_new_tokens, DrafterOptions(), self.store, progress,
                               {**body.settings, "max_new_tokens": body.max_new_tokens})
        except SweepStopped:
            return
        except SpecScopeError as error:
            job.emit({"type": "error", "message": str(error)})
            return
        job.emit({"type": "sweep", **report})

    def _fail(self, lanes: list[LaneRun], message: str) -> None:
        self.store.fail_unfinished([lane.run_id for lane in lanes], message)

    # -- pieces -----------------------------------------------------------------------------------

    def _load(self, job: Job, spec: str) -> LoadedModel:
        if self.models.peek(spec) is None:
            job.emit({"type": "loading", "spec": spec})
        return self.models.get(spec)

    def _settings(self, request: RunRequest, draft_len: int | str) -> GenerationSettings:
        return GenerationSettings(max_new_tokens=request.max_new_tokens, draft_len=draft_len,
                                  sampling=request.sampling, seed=request.seed, stop_strings=tuple(request.stop))

    def _record(self, request: RunRequest, target: LoadedModel, run_id: str, lane: LaneSpec, kind: str,
                group_id: str | None, index: int | None) -> dict:
        return {
            "run_id": run_id, "group_id": group_id, "lane": index, "kind": kind, "turns": request.turns,
            "question_id": request.question_id, "category": request.category, "target": request.target,
            "target_fingerprint": target.fingerprint, "drafter": lane.drafter,
            "drafter_options": {k: v for k, v in lane.options.__dict__.items() if v is not None},
            "draft_len": lane.draft_len, "temperature": request.sampling.temperature,
            "top_p": request.sampling.top_p, "top_k": request.sampling.top_k, "seed": request.seed,
            "max_new_tokens": request.max_new_tokens, "device": str(target.device),
            "dtype": str(target.dtype).removeprefix("torch."), "torch_version": torch.__version__,
            "transformers_version": transformers.__version__, "compile": compile_mode(target.model, target.compile),
        }

    def _reference(self, job: Job, runner: Runner, request: RunRequest) -> list[list[int]]:
        """Replay: one plain target rollout that every lane is scored against (stored as a baseline)."""
        plain = LaneSpec("none", 0, DrafterOptions())
        run_id = uuid.uuid4().hex
        self.store.start_run(self._record(request, runner.target, run_id, plain, "baseline", None, None))
        result = self._drain(job, runner, run_id, runner.stream(request.turns, None, self._settings(request, 0)))
        speed = _summary(result)
        self.store.finish_run(run_id, status="complete", **_final_fields(result, speed))
        job.emit({"type": "baseline", "run_id": run_id, "tokens_per_s": speed["tokens_per_s"]})
        return [turn.output_ids for turn in result]

    def _open_lane(self, job: Job, runner: Runner, request: RunRequest, index: int, lane: LaneSpec,
                   reference: list[list[int]] | None, group_id: str | None) -> LaneRun:
        drafter = self.models.drafter(request.target, lane.drafter, lane.options)
        run_id = uuid.uuid4().hex
        kind = "replay" if reference is not None else ("compare" if group_id else "generate")
        self.store.start_run(self._record(request, runner.target, run_id, lane, kind, group_id,
                                          index if group_id else None))
        events = runner.stream(request.turns, drafter, self._settings(request, lane.draft_len), reference)
        job.emit({"type": "start", "run_id": run_id, "lane": index, "target": request.target,
                  "facts": runner.target.facts.to_dict(), "drafter": lane.drafter, "draft_len": lane.draft_len,
                  "cost": drafter.cost().to_dict() if drafter else None, "group_id": group_id})
        return LaneRun(index, lane, run_id, events)

    def _interleave(self, job: Job, runner: Runner, lanes: list[LaneRun]) -> None:
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
                        self._on_step(job, runner, lane, *item)
        except JobCancelled:
            for lane in lanes:
                self._flush(lane)
                lane.events.close()
                self.store.finish_run(lane.run_id, status="cancelled")
            raise

    def _on_step(self, job: Job, runner: Runner, lane: LaneRun, turn: int, event: StepEvent) -> None:
        lane.steps.append(event)
        record = step_record(runner, turn, event)
        lane.unsaved.append(record)
        job.emit({"type": "step", "run_id": lane.run_id, "lane": lane.index, **record,
                  "running": _running(lane.totals, event)})
        if len(lane.unsaved) >= FLUSH_EVERY_STEPS or time.perf_counter() - lane.last_flush > FLUSH_EVERY_S:
            self._flush(lane)

    def _flush(self, lane: LaneRun) -> None:
        self.store.add_steps(lane.run_id, lane.unsaved)
        lane.unsaved = []
        lane.last_flush = time.perf_counter()

    def _finish_lane(self, job: Job, runner: Runner, request: RunRequest, lane: LaneRun) -> None:
        self._flush(lane)
        speed = _summary(lane.turns)
        baseline = None
        if request.baseline and lane.spec.draft_len != 0 and lane.spec.drafter != "none":
            baseline = self._baseline(job, runner, request)
        elif lane.spec.draft_len == 0 or lane.spec.drafter == "none":
            baseline = speed["tokens_per_s"]
        speedup = metrics.speedup(speed["tokens_per_s"], baseline) if baseline else None
        self.store.finish_run(lane.run_id, status="complete", baseline_tokens_per_s=baseline,
                              **_final_fields(lane.turns, speed))
        job.emit({"type": "summary", "run_id": lane.run_id, "lane": lane.index, **speed,
                  "baseline_tokens_per_s": baseline, "speedup": speedup,
                  "text": "\n\n".join(t.text for t in lane.turns),
                  "output_ids": [i for t in lane.turns for i in t.output_ids],
                  "finish_reason": lane.turns[-1].finish_reason if lane.turns else None})

    def _baseline(self, job: Job, runner: Runner, request: RunRequest) -> float:
        """Tokens/s of plain decoding on the same prompt and settings: from the store, else run now."""
        target = runner.target
        stored = self.store.baseline_tokens_per_s(target.fingerprint, request.turns, request.max_new_tokens,
                                                  request.sampling.temperature, str(target.device),
                                                  compile_mode(target.model, target.compile))
        if stored is not None:
            return stored
        plain = LaneSpec("none", 0, DrafterOptions())
        run_id = uuid.uuid4().hex
        self.store.start_run(self._record(request, target, run_id, plain, "baseline", None, None))
        try:
            turns = self._drain(job, runner, run_id, runner.stream(request.turns, None, self._settings(request, 0)))
        except JobCancelled:
            self.store.finish_run(run_id, status="cancelled")
            raise
        speed = _summary(turns)
        self.store.finish_run(run_id, status="complete", baseline_tokens_per_s=speed["tokens_per_s"],
                              **_final_fields(turns, speed))
        job.emit({"type": "baseline", "run_id": run_id, "tokens_per_s": speed["tokens_per_s"]})
        return speed["tokens_per_s"]

    def _drain(self, job: Job, runner: Runner, run_id: str, events: Iterator) -> list[TurnResult]:
        """Run a stream to its end without emitting steps (baselines, replay references)."""
        turns, steps = [], []
        for turn, item in events:
            job.check()
            if isinstance(item, TurnResult):
                turns.append(item)
            else:
                steps.append(step_record(runner, turn, item))
        self.store.add_steps(run_id, steps)
        return turns


def step_record(runner: Runner, turn: int, event: StepEvent) -> dict:
    """A step as stored and streamed: the event, its turn, and each token decoded for display."""
    piece = runner.target.tokenizer.decode
    return {"turn": turn, **event.to_dict(), "drafted_text": [piece([t]) for t in event.drafted],
            "emitted_text": [piece([t]) for t in event.emitted], "target_text": piece([event.target_token])}


def _running(totals: dict, event: StepEvent) -> dict:
    """Running figures for the live view, kept as counters (metrics.py's definitions)."""
    totals["drafting_steps"] += bool(event.drafted)
    totals["accepted"] += event.accepted if event.drafted else 0
    totals["drafted"] += len(event.drafted)
    totals["seconds"] += event.draft_s + event.verify_s
    totals["tokens"] += len(event.emitted)
    drafting, seconds = totals["drafting_steps"], totals["seconds"]
    return {"al": 1 + totals["accepted"] / drafting if drafting else 1.0,
            "acceptance_rate": totals["accepted"] / totals["drafted"] if totals["drafted"] else 0.0,
            "tokens_per_s": totals["tokens"] / seconds if seconds > 0 else 0.0, "new_tokens": totals["tokens"]}


def _summary(turns: list[TurnResult]) -> dict:
    return RunResult(turns).summary()


def _final_fields(turns: list[TurnResult], speed: dict) -> dict:
    return {"new_tokens": speed["new_tokens"], "al": speed["al"], "acceptance_rate": speed["acceptance_rate"],
            "tokens_per_s": speed["tokens_per_s"], "decode_s": speed["decode_s"], "prefill_s": speed["prefill_s"],
            "prompt_tokens": sum(len(t.prompt_ids) for t in turns),
            "output_text": "\n\n".join(t.text for t in turns),
            "finish_reason": turns[-1].finish_reason if turns else None}
