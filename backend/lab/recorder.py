"""Turns runs into the store's records, the same way for every kind of run: the row a run starts
with (what was asked, of which target, by which software) and the fields it finishes with (its
figures, from metrics.py). The worker's live runs and the sweeps' batched rows both go through
`RunRecorder`, so a run reads the same whoever made it.

Knows nothing about HTTP, jobs or scheduling, and nothing about how the steps were produced.
"""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import tomllib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

from backend.core.metrics import StepLike, summary
from backend.core.models import LoadedModel
from backend.core.target_passes import compile_mode
from backend.core.verify import SamplingParams
from backend.lab.runner import RunResult, TurnResult
from backend.lab.served import SERVED
from backend.lab.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "specscope"


def package_version() -> str | None:
    """The installed package's version, else pyproject.toml's (a source checkout), else None."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def git_commit() -> str | None:
    """The commit of the checkout this code runs from; None outside a git checkout (or without git)."""
    if not (ROOT / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


@functools.cache
def software() -> dict:
    """The software a run was measured with, stored with every run and sweep point."""
    return {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "specscope_version": package_version(),
        "git_commit": git_commit(),
    }


@dataclass(frozen=True)
class RunPlan:
    """What a run was asked to do: everything stored when it starts, apart from the target's facts."""

    kind: str  # generate | compare | replay | baseline | sweep
    turns: Sequence[str]
    drafter: str
    draft_len: int | str
    max_new_tokens: int
    tree_budget: int = 0  # nodes of a tree draft per step; 0 = chains
    tree_topk: int | None = None  # children per tree node, for a tree budget
    min_confidence: float = 0.0  # the confidence stop of a chain; 0 = none
    variant: str | None = None  # what the run varied besides drafter and D: 'T=0.7, tree=16' (labels.variant_label)
    drafter_options: dict = field(default_factory=dict)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    question_id: str | None = None
    category: str | None = None
    group_id: str | None = None
    lane: int | None = None
    batch_size: int | None = None
    split: str | None = None


class RunRecorder:
    """Writes one target's runs to the store: `start` a run, `add_steps` as it goes, then `finish`
    (or `cancel`, or `fail`)."""

    def __init__(self, store: RunStore, target: LoadedModel, target_name: str | None = None) -> None:
        self.store = store
        self.target = target
        self.target_name = target_name or target.spec  # the name the request used (default: the spec)

    @property
    def compile(self) -> str:
        return compile_mode(self.target.model, self.target.compile)

    def start(self, plan: RunPlan) -> str:
        """Store the run as running; returns its new id."""
        run_id = uuid.uuid4().hex
        target = self.target
        self.store.start_run(
            {
                "run_id": run_id,
                "group_id": plan.group_id,
                "lane": plan.lane,
                "kind": plan.kind,
                "turns": list(plan.turns),
                "question_id": plan.question_id,
                "category": plan.category,
                "target": self.target_name,
                "target_fingerprint": target.fingerprint,
                "drafter": plan.drafter,
                "drafter_options": plan.drafter_options,
                "draft_len": plan.draft_len,
                "tree_budget": plan.tree_budget,
                "tree_topk": plan.tree_topk,
                "min_confidence": plan.min_confidence,
                "variant": plan.variant,
                "temperature": plan.sampling.temperature,
                "top_p": plan.sampling.top_p,
                "top_k": plan.sampling.top_k,
                "seed": plan.seed,
                "max_new_tokens": plan.max_new_tokens,
                "device": str(target.device),
                **target.precision,
                "compile": self.compile,
                "batch_size": plan.batch_size,
                "split": plan.split,
                **software(),
            }
        )
        return run_id

    def add_steps(self, run_id: str, records: Sequence[dict]) -> None:
        """Store steps, and count them in the process's served totals (served.py)."""
        self.store.add_steps(run_id, records)
        SERVED.add_steps(self.target_name, records)

    def finish(
        self,
        run_id: str,
        steps: Sequence[StepLike],
        prompt_tokens: int,
        finish_reason: str | None,
        output_text: str | None = None,
        prefill_s: float | None = None,
        baseline_tokens_per_s: float | None = None,
        own_baseline: bool = False,
    ) -> dict:
        """Store the run as complete with its figures; returns metrics.summary of its steps.
        own_baseline: a plain run is its own baseline (its tokens/s stored as the baseline's)."""
        figures = summary(steps)
        if own_baseline:
            baseline_tokens_per_s = figures["tokens_per_s"]
        self.store.finish_run(
            run_id,
            status="complete",
            new_tokens=figures["new_tokens"],
            al=figures["al"],
            acceptance_rate=figures["acceptance_rate"],
            tokens_per_s=figures["tokens_per_s"],
            decode_s=figures["decode_s"],
            prefill_s=prefill_s,
            prompt_tokens=prompt_tokens,
            output_text=output_text,
            finish_reason=finish_reason,
            baseline_tokens_per_s=baseline_tokens_per_s,
        )
        return figures

    def finish_turns(
        self,
        run_id: str,
        turns: Sequence[TurnResult],
        baseline_tokens_per_s: float | None = None,
        own_baseline: bool = False,
    ) -> dict:
        """`finish` for a run of the Runner's turns; returns RunResult.summary (prefill included)."""
        result = RunResult(list(turns))
        figures = result.summary()
        self.finish(
            run_id,
            result.steps,
            sum(len(t.prompt_ids) for t in turns),
            turns[-1].finish_reason if turns else None,
            result.text,
            figures["prefill_s"],
            baseline_tokens_per_s,
            own_baseline,
        )
        return figures

    def cancel(self, run_id: str) -> None:
        self.store.finish_run(run_id, status="cancelled")

    def fail(self, run_ids: Sequence[str], message: str) -> None:
        self.store.fail_unfinished(run_ids, message)
