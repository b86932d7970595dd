"""Seconds per training step of one drafter kind in each precision (fp32, bf16 autocast), measured
interleaved on one batch, so the figure behind `train --precision` can be reproduced on any machine.

A step is the training loop's own `optimizer_step` (the kind's loss under mixed precision, backward, gradient
clipping, an AdamW step). The batch is random token ids with the target's hidden states over them: a step's
cost depends on its shape, not on the text. Knows nothing about any one kind beyond TrainableKind.
"""

from __future__ import annotations

import statistics
import time

import torch

from backend.core.models import LoadedModel
from backend.drafters.trained import TrainBatch
from backend.training.loop import TrainableKind, frozen_target_parts, head_optimizer, native_bf16, optimizer_step

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


@torch.no_grad()
def random_batch(target: LoadedModel, rows: int, window: int, seed: int = 0) -> TrainBatch:
    """`rows` windows of `window` random tokens, every position scored, with all of the target's hidden states."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.facts.vocab_size, (rows, window), generator=generator).to(target.device)  # [B, T]
    states = target.model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states  # L+1 x [B,T,H]
    mask = torch.ones_like(ids, dtype=torch.bool)  # [B, T]
    mask[:, -1] = False  # the last position has no next token inside the window
    return TrainBatch(ids, mask, dict(enumerate(states)))


def time_training_steps(
    kind: TrainableKind,
    target: LoadedModel,
    head_settings: dict,
    rows: int,
    window: int,
    repeats: int,
    precisions: tuple[str, ...] = ("fp32", "bf16"),
) -> dict:
    """Median seconds of a training step per precision (one warm-up step each, then `repeats` rounds that
    alternate the order), with window tokens per second and the ratio to the first precision."""
    parts = frozen_target_parts(target)
    batch = random_batch(target, rows, window)
    counts = torch.bincount(batch.input_ids.flatten().cpu(), minlength=target.facts.vocab_size)  # [V]
    head = kind.new_head(target, head_settings, counts).train()
    optimizer = head_optimizer(head, 1e-4)

    def step(precision: str) -> float:
        _synchronize(target.device)
        started = time.perf_counter()
        optimizer_step(kind, head, parts, batch, optimizer, PRECISIONS[precision])
        _synchronize(target.device)
        return time.perf_counter() - started

    for precision in precisions:
        step(precision)  # warm-up: first-call allocations and kernel selection
    seconds: dict[str, list[float]] = {precision: [] for precision in precisions}
    for round_ in range(repeats):
        for precision in precisions if round_ % 2 == 0 else precisions[::-1]:
            seconds[precision].append(step(precision))
    medians = {precision: statistics.median(times) for precision, times in seconds.items()}
    return {
        "kind": kind.KIND,
        "device": str(target.device),
        "threads": torch.get_num_threads(),
        "native_bf16": native_bf16(target.device),
        "rows": rows,
        "window": window,
        "repeats": repeats,
        "results": [
            {
                "precision": precision,
                "seconds": median,
                "window_tokens_per_s": rows * window / median,
                "vs_first": medians[precisions[0]] / median,
            }
            for precision, median in medians.items()
        ],
    }


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
