"""The training loop every trained drafter shares: batches of cached self-distillation data, AdamW with
warm-up and cosine decay, resumable checkpoints, validation loss, and acceptance measured the only way
that counts: by running the drafter through the engine on held-out instructions.

A trained kind (a module of backend/drafters/, or student.py; listed in kinds.py) supplies what differs
through the `TrainableKind` interface: a fresh head, its loss, a drafter around it, and how it is saved.
Knows nothing about any kind's layers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from typing import Protocol

import torch

from backend.core.cpu_features import has_bf16_unit
from backend.core.drafter import Drafter
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.core.metrics import acceptance_stats
from backend.core.models import LoadedModel
from backend.drafters.trained import TargetParts, TrainBatch
from backend.training.corpus import Instruction
from backend.training.dataset import DistilledData, batches

CHECKPOINT = "checkpoint.pt"
VALIDATION_BATCHES = 8


@dataclass
class TrainSettings:
    tokens: int = 200_000  # training tokens to see (window positions, summed over steps)
    window: int = 256
    rows: int = 8
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    validate_every: int = 100
    checkpoint_every: int = 50
    validation_prompts: int = 8
    validation_draft_len: int = 4
    validation_new_tokens: int = 64
    seed: int = 0
    minutes: float | None = None  # a wall-clock budget: training stops at `tokens` or here, whichever is first
    timed_validations: int = 5  # with a budget, validate at each 1/n of it (as well as every validate_every steps)
    autocast_dtype: torch.dtype | None = None  # autocast's compute dtype for the head's passes (bf16); None: off
    feature_noise: float = 0.0  # a chain head's input noise, a share of each state's RMS (FeatureHead)

    @property
    def steps(self) -> int:
        return max(1, self.tokens // (self.window * self.rows))

    def progress(self, step: int, seconds: float) -> float:
        """How far through training (0..1): by steps, or by time when a budget is set and runs out first."""
        by_steps = step / self.steps
        return max(by_steps, seconds / (60 * self.minutes)) if self.minutes else by_steps


class TrainableKind(Protocol):
    """What every trained kind's module exposes, the same for all (eagle3, mtp, dflash, dspark, draft-model)."""

    KIND: str
    FEATURE_NOISE: bool  # can its head train with noise on the target states it reads (train --feature-noise)?

    def training_layers(self, target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
        """The target hidden states (HF numbering) a TrainBatch must carry for a head with these settings."""

    def new_head(
        self, target: LoadedModel, settings: dict | None = None, token_counts: torch.Tensor | None = None
    ) -> torch.nn.Module:
        """A fresh head; token_counts [V] (training answers' token frequencies) choose a reduced vocabulary."""

    def training_loss(self, head: torch.nn.Module, parts: TargetParts, batch: TrainBatch) -> tuple[torch.Tensor, dict]:
        """(loss, metrics) on one batch."""

    def drafter(self, target: LoadedModel, head: torch.nn.Module) -> Drafter:
        """The Drafter around a head still in memory (validation)."""

    def save(self, head: torch.nn.Module, target: LoadedModel, folder: Path) -> Path:
        """Write the head where `build_drafter` finds it."""

    def load_trained(self, target: LoadedModel, folder: Path) -> tuple[torch.nn.Module, dict]:
        """(the head `save` wrote into folder, with its weights and draft vocabulary, ready to train further;
        the settings it was built with), or one DrafterWeightsError sentence when folder holds no such head."""


@dataclass
class TrainReport:
    steps: int
    seconds: float
    train_loss: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)
    validation: list[dict] = field(default_factory=list)  # {step, tokens, loss, al}
    runs: list[dict] = field(default_factory=list)  # {from_step, ...what the caller said of the run}, oldest first
    origin: dict | None = None  # the card.json of the weights training started from (None: a fresh head)


def train(
    kind: TrainableKind,
    target: LoadedModel,
    head: torch.nn.Module,
    train_data: DistilledData,
    validation_data: DistilledData,
    validation: list[Instruction],
    settings: TrainSettings,
    out: Path,
    progress: Callable[[int, int, dict], None] = lambda step, total, metrics: None,
    run: dict | None = None,
    origin: dict | None = None,
) -> TrainReport:
    """Train `head` for settings.steps steps or settings.minutes, whichever ends first (resuming from
    out/checkpoint.pt if present), validate as it goes, save the final drafter into `out` with kind.save,
    and return the curves. With a time budget the learning-rate schedule follows elapsed time. `run` (its
    data, its command) is recorded in the report's runs with the step it started from, and the checkpoint
    keeps the list, so the weights' history survives resuming with other data. `progress` hears each step's
    loss, metrics and training seconds so far (over every run, validation not counted). `origin`: the card of
    the trained weights `head` holds (--init-from), kept in the report so that the card counts their steps,
    tokens and time before this training's own; a checkpoint's report keeps its own origin. Returns with the
    head in eval mode, as it was saved."""
    refuse_feature_noise(kind, settings.feature_noise)
    parts = frozen_target_parts(target)
    if settings.feature_noise:
        head.feature_noise = settings.feature_noise
    optimizer = head_optimizer(head, settings.learning_rate)
    report = TrainReport(0, 0.0, origin=origin)
    started = time.perf_counter()
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, settings.progress(step, time.perf_counter() - started), settings)
    )
    start_step = _resume(out / CHECKPOINT, head, optimizer, schedule, report)
    if settings.progress(start_step, report.seconds) < 1:  # a resumed run whose budget is spent trains nothing
        report.runs.append({"from_step": start_step, **(run or {})})
    data = batches(train_data, settings.window, settings.rows, target.device, target.dtype, settings.seed + start_step)
    data = chain([next(data)], data)  # the shards are read here, before the clock starts
    started = time.perf_counter() - report.seconds
    head.train()
    done = start_step
    while settings.progress(done, report.seconds) < 1:
        loss, metrics = optimizer_step(kind, head, parts, next(data), optimizer, settings.autocast_dtype)
        schedule.step()
        done += 1
        report.train_loss.append((done, float(loss.detach())))
        seconds = time.perf_counter() - started
        finished = settings.progress(done, seconds) >= 1
        if done % settings.validate_every == 0 or finished or _timed_validation_due(report, settings, seconds):
            report.validation.append(validate(kind, target, head, parts, validation_data, validation, settings, done))
            report.validation[-1]["seconds"] = round(seconds, 1)
            metrics = {**metrics, **report.validation[-1]}
        report.steps, report.seconds = done, seconds  # validation time is not counted against the budget
        if done % settings.checkpoint_every == 0 or finished:
            _checkpoint(out / CHECKPOINT, head, optimizer, schedule, report)
        progress(done, settings.steps, {"loss": float(loss.detach()), **metrics, "seconds": seconds})
        started = time.perf_counter() - report.seconds
    head.eval()
    kind.save(head, target, out)
    return report


def refuse_feature_noise(kind: TrainableKind, noise: float) -> None:
    """One sentence when feature noise is asked of a kind whose head cannot train with it (only chain heads can)."""
    if noise and not kind.FEATURE_NOISE:
        raise SpecScopeError(f"feature noise is for the chain heads (eagle3, mtp), not {kind.KIND}")


def frozen_target_parts(target: LoadedModel) -> TargetParts:
    """The target's parts a head reads, with every target weight frozen: only the head learns."""
    for parameter in target.model.parameters():
        parameter.requires_grad_(False)
    return TargetParts.of(target)


def head_optimizer(head: torch.nn.Module, learning_rate: float) -> torch.optim.AdamW:
    """AdamW over the head's trainable parameters (a shared student's borrowed target modules stay frozen)."""
    return torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.0)


def optimizer_step(
    kind: TrainableKind,
    head: torch.nn.Module,
    parts: TargetParts,
    batch: TrainBatch,
    optimizer: torch.optim.Optimizer,
    autocast_dtype: torch.dtype | None,
) -> tuple[torch.Tensor, dict]:
    """One training step: the kind's loss under mixed_precision, backward, gradients clipped to norm 1, the
    optimizer's step. Returns (loss, metrics); the learning-rate schedule is the caller's."""
    with mixed_precision(batch.input_ids.device, autocast_dtype):
        loss, metrics = kind.training_loss(head, parts, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], 1.0)
    optimizer.step()
    return loss, metrics


@torch.no_grad()
def validate(
    kind: TrainableKind,
    target: LoadedModel,
    head: torch.nn.Module,
    parts: TargetParts,
    data: DistilledData,
    validation: list[Instruction],
    settings: TrainSettings,
    step: int,
) -> dict:
    """Validation loss on cached held-out sequences, and AL of the drafter run through the engine on
    held-out instructions (greedy, D = settings.validation_draft_len)."""
    head.eval()
    held_out = batches(data, settings.window, settings.rows, target.device, target.dtype, epochs=1)
    with mixed_precision(target.device, settings.autocast_dtype):
        losses = [float(kind.training_loss(head, parts, batch)[0]) for batch in islice(held_out, VALIDATION_BATCHES)]
    engine = SpeculativeEngine(target.model, target.eos_token_ids, target.facts.max_context)
    drafter = kind.drafter(target, head)
    run = GenerationSettings(settings.validation_new_tokens, draft_len=settings.validation_draft_len)
    steps = []
    for instruction in validation[: settings.validation_prompts]:
        prompt = instruction.prompt_ids(target.tokenizer)
        steps += engine.generate(prompt, drafter, run).run().steps
    head.train()
    return {
        "step": step,
        "tokens": step * settings.window * settings.rows,
        "validation_loss": sum(losses) / max(1, len(losses)),
        "al": acceptance_stats(steps).al,
    }


def native_bf16(device: torch.device) -> bool:
    """Does this device multiply bf16 matrices in hardware (CUDA's bf16 support, a CPU with AVX512-BF16 or AMX)?
    There mixed precision trains a head ~2.5x faster per step (8 x 256 EAGLE-3 step on one AVX512-BF16 core:
    2.1 s against 5.3 s in fp32); elsewhere bf16 is emulated and slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and has_bf16_unit()


def mixed_precision(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    """Autocast for a training pass: the head's matmuls in `dtype` with fp32 weights, gradients and optimizer
    state; off when dtype is None. The teacher's logits stay in full precision (trained.teacher_logits)."""
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def _timed_validation_due(report: TrainReport, settings: TrainSettings, seconds: float) -> bool:
    """With a time budget: has the next 1/timed_validations mark of it passed since the last validation?"""
    if not settings.minutes:
        return False
    interval = 60 * settings.minutes / settings.timed_validations
    last = report.validation[-1].get("seconds", 0.0) if report.validation else 0.0
    return seconds // interval > last // interval


def _lr_factor(step: int, progress: float, settings: TrainSettings) -> float:
    """Linear warm-up over warmup_steps, then cosine decay to 10% as progress (0..1, counted from step 0, so the
    decay has begun by the end of the warm-up) runs out."""
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _checkpoint(path: Path, head: torch.nn.Module, optimizer, schedule, report: TrainReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(
        {
            "head": head.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "report": report.__dict__,
        },
        temporary,
    )
    temporary.replace(path)  # a kill mid-save never leaves a half-written checkpoint


def _resume(path: Path, head: torch.nn.Module, optimizer, schedule, report: TrainReport) -> int:
    if not path.is_file():
        return 0
    state = torch.load(path, map_location="cpu", weights_only=False)
    head.load_state_dict(state["head"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    report.__dict__.update({"origin": None, **state["report"]})  # a checkpoint from before origins were kept
    return report.steps
