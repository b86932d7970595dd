"""Batched speculative decoding with ragged acceptance: B sequences share every target forward pass,
and each keeps its own number of accepted drafts.

Each step every active row drafts k_r tokens; one pass scores [newest token, d_1..d_k_r] for every
row, padded to K + 1 = max k_r + 1; each row is verified on its own slice and keeps its first a_r + 1
new cache slots (batch_cache.py: masked slots over Hugging Face's cache, or per-row lengths over the
static cache of the compiled path). A row may draft a token tree: it is scored
under its tree mask in the same pass and keeps its accepted path. Finished rows leave the batch.
D = 0 is plain batched decoding, the baseline at each batch size. Works on token ids; the drafters,
policies and stop rules are the single-sequence ones (engine.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from backend.core.batch_cache import PREFILL_TOKENS_PER_PASS, rows_cache
from backend.core.drafter import Drafter
from backend.core.engine import GenerationSettings, Sequence, SpeculativeEngine, StepEvent
from backend.core.tree import TreeLayout


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
    def __init__(self, engine: SpeculativeEngine, prefill_tokens_per_pass: int = PREFILL_TOKENS_PER_PASS) -> None:
        """`prefill_tokens_per_pass`: the most padded tokens one shared prefill pass of the compiled path
        holds (0: every prompt alone; see batch_cache.prefill_groups)."""
        self.engine = engine
        self.prefill_tokens_per_pass = prefill_tokens_per_pass

    def generate(self, prompts: list[list[int]], drafter: Drafter | None, settings: GenerationSettings) -> BatchResult:
        """Decode all prompts together (greedy or sampled, per-row seeds settings.seed + row)."""
        engine = self.engine
        active: list[int] = list(range(len(prompts)))  # original row numbers still decoding
        sequences = [
            Sequence(engine, prompt, drafter, _row_settings(settings, row), batch_size=lambda: len(active))
            for row, prompt in enumerate(prompts)
        ]
        times: dict[int, list[float]] = {row: [] for row in active}
        started = engine.clock()
        hidden_layers = drafter.target_hidden_layers if drafter else ()
        cache = rows_cache(engine, sequences, hidden_layers, self.prefill_tokens_per_pass)
        prefill_s = engine.clock() - started
        try:
            while active:
                self._step([sequences[row] for row in active], cache, hidden_layers)
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
                        cache.select(keep)
                if active:
                    cache.tidy()
        finally:
            for sequence in sequences:
                sequence.close()
        wall = engine.clock() - started
        rows = [self._row_result(sequence, times[row]) for row, sequence in enumerate(sequences)]
        return BatchResult(rows, wall, prefill_s)

    def _step(self, rows: list[Sequence], cache, hidden_layers: tuple[int, ...]) -> None:
        """One shared verification pass for every active row."""
        engine = self.engine
        pending = [sequence.draft() for sequence in rows]
        tokens = [[sequence.committed[-1], *step.drafted] for sequence, step in zip(rows, pending, strict=True)]
        width = max(len(row) for row in tokens)  # K + 1
        inputs = torch.zeros(len(rows), width, dtype=torch.long, device=engine.device)  # [B, K+1]
        for i, row in enumerate(tokens):
            inputs[i, : len(row)] = torch.tensor(row, device=engine.device)
        started = engine.clock()
        trees = [TreeLayout.of(step.parents, engine.device) if step.parents is not None else None for step in pending]
        result = cache.forward(inputs, [len(row) for row in tokens], bool(hidden_layers), trees)
        logits = result.logits  # [B, K+1, V]
        verdicts = [
            sequence.verify(logits[i, : len(step.drafted) + 1], step, tree)
            for i, (sequence, step, tree) in enumerate(zip(rows, pending, trees, strict=True))
        ]
        cache.accept([verdict.kept_rows() for verdict in verdicts])
        verify_s = engine.clock() - started
        for i, (sequence, step, verdict) in enumerate(zip(rows, pending, verdicts, strict=True)):
            hidden = {layer: result.hidden[layer][i, verdict.kept_rows()] for layer in hidden_layers}
            shown = sequence.shown_probs(logits[i, : len(step.drafted) + 1], verdict)
            sequence.commit(step, verdict, shown, verify_s, hidden)

    @staticmethod
    def _row_result(sequence: Sequence, times: list[float]) -> RowResult:
        emitting = [t for t, step in zip(times, sequence.steps, strict=True) if step.emitted]
        return RowResult(
            sequence.prompt_ids,
            sequence.output_ids,
            sequence.steps,
            sequence.finish_reason,
            emitting[0] if emitting else 0.0,
            emitting[-1] if emitting else 0.0,
        )


def _row_settings(settings: GenerationSettings, row: int) -> GenerationSettings:
    return dataclasses.replace(settings, seed=settings.seed + row)
