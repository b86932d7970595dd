"""Self-distillation data: the target answers the corpus instructions (greedy, batched), then one
forward pass over each prompt + answer records the hidden states the drafters learn from. Everything
is cached on disk once per (target, corpus, layers, answer length) and reused by every drafter's training.

Two teachers fill the same cache. Generating answers costs one target pass per answer token. The
prefill-only teacher reads an instruction's existing `reference` answer instead (readings.py): one
forward pass over prompt + reference labels every position with the target's full next-token
distribution (lm_head of the cached final state), hundreds of positions a pass. The drafters train on
those distributions, not on the text's own next tokens, so either teacher teaches the target's behaviour.

Cache layout: `<cache>/<target fingerprint[:16]>-<corpus hash>-<layers>-<max_new_tokens>/` holding `manifest.json`
(instructions done, tokens, layers) and `shard-NNNNN.safetensors`, each with `input_ids` [N] (the
sequences concatenated), `starts` [S+1] (sequence boundaries), `loss_mask` [N] (answer positions
whose next token is a target) and `hidden.<layer>` [N, H] in fp16. Generation resumes where it
stopped. `batches` packs sequences into fixed windows for training.

Knows nothing about any drafter mechanism; `layers` is the union of what the mechanisms ask for.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from backend.core.batch import BatchEngine
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.models import LoadedModel
from backend.core.target_passes import compile_mode
from backend.drafters.trained import TrainBatch
from backend.training.corpus import Instruction

SHARD_SEQUENCES = 32
MAX_PROMPT_TOKENS = 480
MAX_REFERENCE_TOKENS = 512  # a reference answer read by the prefill-only teacher is cut here


def default_cache_root() -> Path:
    return Path(os.environ.get("SPECSCOPE_CACHE", Path.home() / ".cache" / "specscope")) / "training"


@dataclass
class DistilledData:
    """One split of one or more caches (generated answers, prefilled references) trained on together."""

    folders: tuple[Path, ...]
    layers: tuple[int, ...]
    split: str

    def shards(self) -> list[Path]:
        return [shard for folder in self.folders for shard in sorted(folder.glob(f"{self.split}-shard-*.safetensors"))]

    def tokens(self) -> int:
        return sum(read_manifest(folder)["tokens"].get(self.split, 0) for folder in self.folders)

    def __add__(self, other: DistilledData) -> DistilledData:
        if (self.layers, self.split) != (other.layers, other.split):
            raise ValueError("only caches of the same layers and split can be trained on together")
        return DistilledData(self.folders + other.folders, self.layers, self.split)


def distil(
    target: LoadedModel,
    instructions: list[Instruction],
    layers: tuple[int, ...],
    split: str,
    max_new_tokens: int = 192,
    batch_size: int = 8,
    token_budget: int | None = None,
    cache_root: Path | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
    minutes: float | None = None,
    order_seed: int = 0,
) -> DistilledData:
    """Generate (or resume) the target's answers to the `split` instructions (or read their references) and cache
    their hidden states, until every instruction is done, `token_budget` sequence tokens are cached for this split,
    or `minutes` have passed (checked between shards; 0: only what is cached). A shard holds
    max(SHARD_SEQUENCES, batch_size) sequences. The instructions not yet cached are taken in an order fixed by the
    corpus and `order_seed`: another seed starts on other instructions than an earlier cache of the same corpus
    (say, on another machine) began with, so a fresh cache short of the corpus holds mostly new ones."""
    deadline = time.monotonic() + 60 * minutes if minutes is not None else float("inf")
    layers = tuple(sorted(set(layers)))
    corpus = hashlib.sha256(
        "\n".join(
            f"{i.instruction_id}\t{i.text}"
            + (f"\t{i.history}" if i.history else "")
            + (f"\t{i.reference}" if i.reference else "")
            for i in instructions
        ).encode()
    ).hexdigest()
    folder = (cache_root or default_cache_root()) / (
        f"{target.fingerprint[:16]}-{corpus[:8]}-{'_'.join(map(str, layers))}-{max_new_tokens}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(folder)
    done = set(manifest["done"].get(split, []))
    todo = [i for i in instructions if i.split == split and i.instruction_id not in done]
    # a budget short of the whole corpus still samples all of it
    random.Random(corpus if order_seed == 0 else f"{corpus}/{order_seed}").shuffle(todo)
    tokens = manifest["tokens"].get(split, 0)
    budget = token_budget or float("inf")
    shard = len(list(folder.glob(f"{split}-shard-*.safetensors")))
    per_shard = max(SHARD_SEQUENCES, batch_size)
    for start in range(0, len(todo), per_shard):
        if tokens >= budget or time.monotonic() >= deadline:
            break
        group = todo[start : start + per_shard]
        prompts = [i.prompt_ids(target.tokenizer)[-MAX_PROMPT_TOKENS:] for i in group]
        answers = _answers(target, group, prompts, max_new_tokens, batch_size)
        sequences = [prompt + answer for prompt, answer in zip(prompts, answers, strict=True)]
        # position t predicts token t+1: answer tokens are predicted from len(prompt)-1 on
        masks = [[False] * (len(p) - 1) + [True] * len(a) + [False] for p, a in zip(prompts, answers, strict=True)]
        _write_shard(folder / f"{split}-shard-{shard:05d}.safetensors", target, sequences, masks, layers, batch_size)
        shard += 1
        tokens += sum(len(s) for s in sequences)
        manifest["done"].setdefault(split, []).extend(i.instruction_id for i in group)
        manifest["tokens"][split] = tokens
        manifest["layers"] = list(layers)
        (folder / "manifest.json").write_text(json.dumps(manifest))
        progress(min(tokens, int(min(budget, 1e18))), int(budget) if budget != float("inf") else tokens)
    return DistilledData((folder,), layers, split)


def _answers(
    target: LoadedModel, group: list[Instruction], prompts: list[list[int]], max_new_tokens: int, batch_size: int
) -> list[list[int]]:
    """Each instruction's answer tokens: its reference read as it is (prefill-only teacher), else the target's
    greedy answer (generated in batches of similar prompt length)."""
    answers = [reference_ids(target, i.reference) if i.reference else [] for i in group]
    to_generate = [row for row, i in enumerate(group) if not i.reference]
    for batch in _length_batches([prompts[row] for row in to_generate], batch_size):
        rows = [to_generate[b] for b in batch]
        for row, answer in zip(rows, greedy_answers(target, [prompts[r] for r in rows], max_new_tokens), strict=True):
            answers[row] = answer
    return answers


def reference_ids(target: LoadedModel, reference: str) -> list[int]:
    """A reference answer's tokens as the target would end them: with the end-of-turn token the tokenizer names
    (when it is one of the target's end tokens), unless the reference was cut at MAX_REFERENCE_TOKENS."""
    ids = target.tokenizer(reference, add_special_tokens=False)["input_ids"]
    if len(ids) >= MAX_REFERENCE_TOKENS:
        return ids[:MAX_REFERENCE_TOKENS]
    end = target.tokenizer.eos_token_id
    return ids + [end if end in target.eos_token_ids else min(target.eos_token_ids)]


def _length_batches(sequences: list[list[int]], batch_size: int) -> Iterator[list[int]]:
    """Indices of `sequences` in batches of similar length, shortest first: padded batches pad less."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    return (order[first : first + batch_size] for first in range(0, len(order), batch_size))


def greedy_answers(
    target: LoadedModel, prompts: list[list[int]], max_new_tokens: int, stop_ids: frozenset[int] = frozenset()
) -> list[list[int]]:
    """The target's greedy answers to a batch of prompts, each up to and including its end-of-sequence token (or
    the first of `stop_ids`, tokens that end an answer besides the target's own end tokens).
    On a CPU where the target's compiled passes run (target.compile), SpecScope's batched engine decodes them
    (plain, D = 0), the same answers at twice the rate of Hugging Face's eager `generate` on a 2-core AMD EPYC
    without AVX-512 (68 against 34 answer tokens/s at batch 16, docs/measurements/distil_answers_cpu.txt).
    Elsewhere (a GPU, a model without the compiled path) one left-padded `generate` call: a step costs one
    forward for the whole batch, what makes distillation fast on a GPU (the batched engine syncs per row)."""
    if target.device.type == "cpu" and compile_mode(target.model, target.compile) == "on":
        return engine_answers(target, prompts, max_new_tokens, stop_ids)
    return generated_answers(target, prompts, max_new_tokens, stop_ids)


@torch.inference_mode()
def engine_answers(
    target: LoadedModel, prompts: list[list[int]], max_new_tokens: int, stop_ids: frozenset[int] = frozenset()
) -> list[list[int]]:
    """greedy_answers through the batched engine, plain decoding, in the target's compile mode."""
    ends = set(target.eos_token_ids) | stop_ids
    engine = SpeculativeEngine(target.model, ends, target.facts.max_context, target.compile)
    rows = BatchEngine(engine).generate(prompts, None, GenerationSettings(max_new_tokens, draft_len=0)).rows
    return [row.output_ids for row in rows]


@torch.inference_mode()
def generated_answers(
    target: LoadedModel, prompts: list[list[int]], max_new_tokens: int, stop_ids: frozenset[int] = frozenset()
) -> list[list[int]]:
    """greedy_answers through one left-padded Hugging Face `generate` call."""
    ends = set(target.eos_token_ids) | stop_ids
    width = max(len(p) for p in prompts)
    pad = min(target.eos_token_ids)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=target.device)  # [B, P]
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=target.device)  # [B, P]
    out = target.model.generate(
        input_ids=ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        eos_token_id=sorted(ends),
        pad_token_id=pad,
    )  # [B, P + N]
    answers = []
    for row in out[:, width:].tolist():
        stops = [i for i, token in enumerate(row) if token in ends]
        answers.append(row[: stops[0] + 1] if stops else row)
    return answers


@torch.inference_mode()
def _write_shard(
    path: Path,
    target: LoadedModel,
    sequences: list[list[int]],
    masks: list[list[bool]],
    layers: tuple[int, ...],
    batch_size: int,
) -> None:
    """One forward per batch of sequences, right-padded: with causal attention and positions 0..T-1, the
    padding after a sequence cannot change its states, so no attention mask is needed."""
    hidden: dict[int, list[torch.Tensor]] = {layer: [torch.empty(0)] * len(sequences) for layer in layers}
    for rows in _length_batches(sequences, batch_size):
        width = max(len(sequences[i]) for i in rows)
        ids = torch.tensor(
            [sequences[i] + [0] * (width - len(sequences[i])) for i in rows], device=target.device
        )  # [B, T]
        # logits_to_keep=1: the states are wanted, not [B, T, V] logits
        states = target.model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states  # L+1 x [B,T,H]
        for position, row in enumerate(rows):
            for layer in layers:
                hidden[layer][row] = states[layer][position, : len(sequences[row])].to("cpu", torch.float16)  # [T, H]
    lengths = torch.tensor([len(s) for s in sequences])
    tensors = {
        "input_ids": torch.tensor([t for s in sequences for t in s], dtype=torch.int64),
        "starts": torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]),
        "loss_mask": torch.tensor([m for mask in masks for m in mask], dtype=torch.bool),
    }
    tensors |= {f"hidden.{layer}": torch.cat(hidden[layer]) for layer in layers}
    save_file(tensors, str(path))


def read_manifest(folder: Path) -> dict:
    """A cache folder's manifest: instructions done and tokens per split, the hidden states its shards hold
    (empty for a folder no shard was written to yet)."""
    path = folder / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {"done": {}, "tokens": {}, "layers": []}


def batches(
    data: DistilledData,
    window: int,
    rows: int,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    epochs: int | None = None,
) -> Iterator[TrainBatch]:
    """Training batches of `rows` windows of `window` tokens, each window cut from one sequence (sequences
    longer than a window give several; shorter ones are padded with a masked tail). Shuffled per epoch."""
    rng = random.Random(seed)
    pieces = []  # (shard index, start, end) of every window
    shards = [load_file(str(path)) for path in data.shards()]
    for index, shard in enumerate(shards):
        starts = shard["starts"].tolist()
        for begin, end in zip(starts, starts[1:], strict=False):
            pieces += [(index, s, min(s + window, end)) for s in range(begin, end - 1, window)]
    if not pieces:
        raise ValueError(f"no cached training data in {', '.join(map(str, data.folders))} for the {data.split} split")
    epoch = 0
    while epochs is None or epoch < epochs:
        rng.shuffle(pieces)
        for first in range(0, len(pieces) - rows + 1 if len(pieces) >= rows else 1, rows):
            yield _collate(
                [shards[i] for i, _, _ in pieces[first : first + rows]],
                [(s, e) for _, s, e in pieces[first : first + rows]],
                data.layers,
                window,
                device,
                dtype,
            )
        epoch += 1


def _collate(
    shards: list[dict],
    spans: list[tuple[int, int]],
    layers: tuple[int, ...],
    window: int,
    device: torch.device,
    dtype: torch.dtype,
) -> TrainBatch:
    rows = len(spans)
    hidden_size = shards[0][f"hidden.{layers[0]}"].shape[1]
    input_ids = torch.zeros(rows, window, dtype=torch.int64)  # [B, T]
    loss_mask = torch.zeros(rows, window, dtype=torch.bool)  # [B, T]
    hidden = {layer: torch.zeros(rows, window, hidden_size) for layer in layers}  # layer -> [B, T, H]
    for row, (shard, (start, end)) in enumerate(zip(shards, spans, strict=True)):
        n = end - start
        input_ids[row, :n] = shard["input_ids"][start:end]
        loss_mask[row, :n] = shard["loss_mask"][start:end]
        loss_mask[row, n - 1] = False  # the window's last position has no next token inside it
        for layer in layers:
            hidden[layer][row, :n] = shard[f"hidden.{layer}"][start:end].float()
    return TrainBatch(
        input_ids.to(device), loss_mask.to(device), {layer: h.to(device, dtype) for layer, h in hidden.items()}
    )
