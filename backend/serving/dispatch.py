"""What the worker's compute thread does with a job: load its target (saying so while it loads),
then hand it to live runs (generate, compare) or run it as a sweep; a clear error record when the
target cannot be had.

Records of its own (each a dict with a `type`):
  loading   {spec}                                      a model is being loaded
  progress  {label, done, total}                        a sweep's progress
  sweep     {sweep_id, points, frontier, details, by_category}
  error     {message}                                   a clear message; nothing else follows

Knows nothing about HTTP.
"""

from __future__ import annotations

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters import DrafterOptions
from backend.lab.prompts import Question
from backend.lab.store import RunStore
from backend.lab.sweep import SweepStopped, run_sweep
from backend.serving.jobs import Job
from backend.serving.live import LiveRuns
from backend.serving.model_cache import ModelCache


class JobDispatcher:
    def __init__(self, models: ModelCache, store: RunStore, default_target: str = "default") -> None:
        self.models = models
        self.store = store
        self.default_target = default_target
        self.live = LiveRuns(models, store)

    def execute(self, job: Job) -> None:
        try:
            target = self._load(job, job.request.target or self.default_target)
        except SpecScopeError as error:
            job.emit({"type": "error", "message": str(error)})
            return
        if job.kind == "sweep":
            self._sweep(job, job.request.target or self.default_target, target)
        else:
            self.live.run(job, target)

    def _load(self, job: Job, spec: str) -> LoadedModel:
        if self.models.peek(spec) is None:
            job.emit({"type": "loading", "spec": spec})
        return self.models.get(spec)

    def _sweep(self, job: Job, spec: str, target: LoadedModel) -> None:
        """A sweep as one job: progress records as it goes, then {type: sweep, report}. Over several
        dtypes, the target is loaded in each (kept like any other model)."""
        body = job.request
        try:
            if body.dtypes:
                target, *others = [self.models.get(spec, dtype) for dtype in dict.fromkeys(body.dtypes)]
            else:
                others = []
        except SpecScopeError as error:
            job.emit({"type": "error", "message": str(error)})
            return
        questions = [Question(q.question_id, q.category, tuple(q.turns)) for q in body.questions]

        def progress(label: str, done: int, total: int) -> None:
            if job.cancelled.is_set():
                raise SweepStopped
            job.emit({"type": "progress", "label": label, "done": done, "total": total})

        try:
            report = run_sweep(
                target,
                questions,
                body.drafters,
                body.draft_lens,
                body.batch_sizes,
                body.max_new_tokens,
                DrafterOptions(),
                self.store,
                progress,
                {**body.settings, "max_new_tokens": body.max_new_tokens},
                body.temperatures,
                body.options,
                body.tree_budgets,
                body.tree_topk,
                body.min_confidences,
                others,
            )
        except SweepStopped:
            return
        except SpecScopeError as error:
            job.emit({"type": "error", "message": str(error)})
            return
        job.emit({"type": "sweep", **report})
