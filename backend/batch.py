"""Batched speculative decoding with ragged acceptance: B sequences share every target forward pass,
and each keeps its own number of accepted drafts.

Layout: one rectangular KV cache [B, kv_heads, slots, head_dim] and a boolean mask `valid`
[B, slots]. Each step appends K + 1 slots to every row (its newest token, its own k_r drafts, then
padding up to K = max k_r). After verification a row keeps its first a_r + 1 new slots; the rest are
masked out rather than cropped (one row cannot be cropped alone in a rectangular cache), the tail is
cropped where no row needs it, and the cache is compacted when masked slots pile up. Positions are
explicit per row, so a masked hole never shifts a row's RoPE. This is the transformers-only form of
what vLLM does with a paged cache, where a rejected draft's slot is simply not counted in the
request's sequence length (research notes §8.4).

Prompts are prefilled one by one (exactly the single-sequence computation) and stacked left-padded.
Finished rows leave the batch. D = 0 is plain batched decoding, the baseline at each batch size.
Works on token ids; the drafters, policies and stop rules are the single-sequence ones (engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.drafters.base import Drafter
from backend.engine import GenerationSettings, Sequence, SpeculativeEngine, StepEvent
from backend.kv import batched_forward, compact, new_cache, select_rows, stack_caches, trim_cache

HOLES_BEFORE_COMPACTING = 1.5  # compact once the cache is this many times the longest row's real tokens


@dataclass
class RowResult:
    prompt_ids: list[int]
    output_ids: list[int]
    steps: list[StepEvent]
    finish_reason: str | None
    first_token_s: float  # from the batch's start (prefill included) to this row's first token
    last_token_s: float  # ... to its last token

    @property
    def time_per_output_token(self) -> float | None:
        """TPOT: (last token time - first token time) / (tokens - 1), as serving benchmarks define it."""
        if len(self.output_ids) < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (len(self.output_ids) - 1)


@dataclass
class BatchResult:
    rows: list[RowResult]
    wall_s: float  # prefill + decode of the whole batch
    prefill_s: float  # the prompts' prefill (and drafter start-up) at the beginning

    @property
    def new_tokens(self) -> int:
        return sum(len(row.output_ids) for row in self.rows)

    @property
    def throughput(self) -> float:
        """Generated tokens per second across the batch, prefill included (as serving benchmarks count)."""
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decode_throughput(self) -> float:
        """Generated tokens per second of the decode phase alone."""
        decode_s = self.wall_s - self.prefill_s
        return self.new_tokens / decode_s if decode_s > 0 else 0.0


class BatchEngine:
    def __init__(self, engine: SpeculativeEngine) -> None:
        self.engine = engine

    def generate(self, prompts: list[list[int]], drafter: Drafter | None,
                 settings: GenerationSettings) -> BatchResult:
        """Decode all prompts together (greedy or sampled, per-row seeds settings.seed + row)."""
        engine = self.engine
        active: list[int] = list(range(len(prompts)))  # original row numbers still decoding
        sequences = [Sequence(engine, prompt, drafter, _row_settings(settings, row), batch_size=lambda: len(active))
                     for row, prompt in enumerate(prompts)]
        times: dict[int, list[float]] = {row: [] for row in active}
        started = engine.clock()
        caches = []
        hidden_layers = drafter.target_hidden_layers if drafter else ()
        for sequence in sequences:  # one by one: measured faster on CPU than one padded pass (no padding waste)
            cache = new_cache(engine.model)
            sequence.start(engine.prefill(sequence.prompt_ids[:-1], cache, hidden_layers))
            caches.append(cache)
        cache, valid = stack_caches(caches, new_cache(engine.model), engine.device)
        del caches
        prefill_s = engine.clock() - started
        try:
            while active:
                valid = self._step([sequences[row] for row in active], cache, valid)
                now = engine.clock() - started
                for row in active:
                    times[row].append(now)
                finished = [i for i, row in enumerate(active) if sequences[row].finish_reason is not None]
                if finished:
                    keep = [i for i in range(len(active)) if i not in finished]
                    for i in finished:
                        sequences[active[i]].close()
                    active = [active[i] for i in keep]
                    if active:
                        valid = select_rows(cache, valid, keep)
                if active and valid.shape[1] > HOLES_BEFORE_COMPACTING * int(valid.sum(dim=1).max()):
                    valid = compact(cache, valid)
        finally:
            for sequence in sequences:
                sequence.close()
        wall = engine.clock() - started
        rows = [self._row_result(sequence, times[row]) for row, sequence in enumerate(sequences)]
        return BatchResult(rows, wall, prefill_s)

    def _step(self, rows: list[Sequence], cache, valid: torch.Tensor) -> torch.Tensor:
        """One shared verification pass for every active row; returns the new valid mask."""
        engine = self.engine
        pending = [sequence.draft() for sequence in rows]
        width = 1 + max(len(p.drafted) for p in pending)  # K + 1
        device = engine.device
        inputs = torch.zeros(len(rows), width, dtype=torch.long, device=device)  # [B, K+1]
        new_valid = torch.zeros(len(rows), width, dtype=torch.bool, device=device)  # [B, K+1]
        counts = valid.sum(dim=1)  # [B]: real tokens already cached per row
        for i, (sequence, step) in enumerate(zip(rows, pending, strict=True)):
            tokens = [sequence.committed[-1], *step.drafted]
            inputs[i, : len(tokens)] = torch.tensor(tokens, device=device)
            new_valid[i, : len(tokens)] = True
        positions = counts[:, None] + torch.arange(width, device=device)[None, :]  # [B, K+1]
        mask = torch.cat([valid, new_valid], dim=1)  # [B, slots + K + 1]
        slots = valid.shape[1]
        hidden_layers = rows[0].drafter.target_hidden_layers if rows[0].drafter else ()
        started = engine.clock()
        result = batched_forward(engine.model, inputs, mask, positions, cache, bool(hidden_layers))
        logits = result.logits  # [B, K+1, V]
        verdicts = [sequence.verify(logits[i, : len(step.drafted) + 1], step)
                    for i, (sequence, step) in enumerate(zip(rows, pending, strict=True))]
        for i, (verdict, _) in enumerate(verdicts):
            mask[i, slots + verdict.accepted + 1:] = False  # rejected drafts and padding stay masked
        keep = slots + max(verdict.accepted for verdict, _ in verdicts) + 1
        trim_cache(cache, keep)
        verify_s = engine.clock() - started
        for i, (sequence, step, (verdict, shown)) in enumerate(zip(rows, pending, verdicts, strict=True)):
            hidden = {layer: result.hidden[layer][i, : verdict.accepted + 1] for layer in hidden_layers}
            sequence.commit(step, verdict, shown, verify_s, hidden)
        return mask[:, :keep]

    @staticmethod
    def _row_result(sequence: Sequence, times: list[float]) -> RowResult:
        emitting = [t for t, step in zip(times, sequence.steps, strict=True) if step.emitted]
        return RowResult(sequence.prompt_ids, sequence.output_ids, sequence.steps, sequence.finish_reason,
                         emitting[0] if emitting else 0.0, emitting[-1] if emitting else 0.0)


def _row_settings(settings: GenerationSettings, row: int) -> GenerationSettings:
    return GenerationSettings(settings.max_new_tokens, settings.draft_len, settings.sampling, settings.seed + row,
                              settings.stop_strings)
