"""`bench forward`: what one target pass of T new tokens costs, eager (Hugging Face's forward over a
growing cache) beside compiled (the static cache and graphs of fast_forward.py), at batch sizes B.

A pass runs on top of `context` cached tokens and is rolled back after timing, so every pass sees the
same cache. Modes, widths and batch sizes are interleaved in shuffled order within each repeat, so
a shared machine's drift does not favour one of them; figures are medians. Also measured in the same
process: the memory roofline of plain decoding (the matmul weights read per token over the bandwidth
of one large read) and plain decoding tokens/s of the engine in each mode. `profile` adds the top
operators of a 1-token and a 9-token pass per mode (torch.profiler). `prefill_benchmark` times the
first token of a batch of real prompts on the compiled path, prompts prefilled one by one beside
prompts of similar lengths prefilled together (batch_cache.prefill_groups).

Knows nothing about printing; the CLI formats what `forward_benchmark` returns.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

import torch

from backend.core.batch import BatchEngine
from backend.core.batch_cache import PREFILL_TOKENS_PER_PASS
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.engine import device_clock as _clock
from backend.core.kv import batched_forward, cached_forward, new_cache, stack_caches, trim_cache
from backend.core.models import LoadedModel
from backend.core.target_passes import single_sequence_graphs, target_passes

WIDTHS = (1, 2, 4, 8, 16, 32)
MODES = {"eager": "off", "compiled": "on"}


def forward_benchmark(
    target: LoadedModel,
    modes: list[str],
    batch_sizes: list[int],
    widths=WIDTHS,
    context: int = 200,
    repeats: int = 7,
    plain_tokens: int = 64,
    profile: bool = False,
    progress: Callable[[str], None] = lambda label: None,
    seed: int = 0,
) -> dict:
    torch.manual_seed(seed)
    vocab = target.model.config.get_text_config(decoder=True).vocab_size
    runners = {
        (mode, size): _pass_runner(target, mode, size, context, vocab, max(widths))
        for mode in modes
        for size in batch_sizes
    }
    for key, run in runners.items():  # compiles, and warms every width
        progress(f"warming {key[0]} B={key[1]}")
        for width in widths:
            run(width)
    samples: dict[tuple[str, int, int], list[float]] = {}
    order = [(mode, size, width) for mode in modes for size in batch_sizes for width in widths]
    shuffle = random.Random(seed)
    for repeat in range(repeats):
        shuffle.shuffle(order)
        for mode, size, width in order:
            samples.setdefault((mode, size, width), []).append(runners[(mode, size)](width))
        progress(f"repeat {repeat + 1}/{repeats}")
    results = []
    for mode, size, width in sorted(samples, key=lambda k: (modes.index(k[0]), k[1], k[2])):
        ms = 1000 * statistics.median(samples[(mode, size, width)])
        one = 1000 * statistics.median(samples[(mode, size, 1)]) if (mode, size, 1) in samples else None
        results.append(
            {"mode": mode, "batch_size": size, "tokens": width, "ms": ms, "vs_one_token": ms / one if one else None}
        )
    report = {
        "target": target.spec,
        "device": str(target.device),
        **target.precision,
        "context": context,
        "repeats": repeats,
        "results": results,
        "bandwidth_gb_s": memory_bandwidth(target.device),
        "weight_mb_per_token": weight_bytes(target) / 1e6,
    }
    report["roofline_tps"] = report["bandwidth_gb_s"] * 1e9 / weight_bytes(target)
    report["plain_tps"] = _plain_speeds(target, modes, vocab, plain_tokens, repeats=3, seed=seed)
    report["graphs"] = single_sequence_graphs(target.model) if "compiled" in modes else "eager"
    if profile:
        report["profile"] = {
            mode: {width: _profile(runners[(mode, batch_sizes[0])], width) for width in (1, 9)} for mode in modes
        }
    return report


def prefill_benchmark(
    target: LoadedModel, prompts: list[list[int]], batch_sizes: list[int], repeats: int = 3, seed: int = 0
) -> list[dict]:
    """Time to the first token of a batch of the first B prompts (plain greedy, compiled path), its
    prompts prefilled one by one and grouped by length; medians over repeats, the two interleaved."""
    engine = SpeculativeEngine(target.model, set(), target.facts.max_context, "on")
    ways = {"one_by_one_s": BatchEngine(engine, 0), "grouped_s": BatchEngine(engine, PREFILL_TOKENS_PER_PASS)}
    order = [(way, size) for way in ways for size in batch_sizes]
    samples: dict[tuple[str, int], list[float]] = {key: [] for key in order}
    shuffle = random.Random(seed)
    for repeat in range(repeats + 1):  # the first round compiles the batched graphs and is not counted
        shuffle.shuffle(order)
        for way, size in order:
            result = ways[way].generate(prompts[:size], None, GenerationSettings(max_new_tokens=1, draft_len=0))
            if repeat:
                samples[(way, size)].append(max(row.first_token_s for row in result.rows))
    results = []
    for size in batch_sizes:
        row = {"batch_size": size, **{way: statistics.median(samples[(way, size)]) for way in ways}}
        row["prompt_tokens"] = sum(len(prompt) for prompt in prompts[:size])
        row["speedup"] = row["one_by_one_s"] / row["grouped_s"]
        results.append(row)
    return results


def weight_bytes(target: LoadedModel) -> int:
    """Bytes of matmul weights a one-token pass reads (embedding lookups are a row each; a tied LM head counts once)."""
    linears = {id(m.weight): m.weight for m in target.model.modules() if isinstance(m, torch.nn.Linear)}
    return sum(w.numel() * w.element_size() for w in linears.values())


def memory_bandwidth(device: torch.device, megabytes: int = 512) -> float:
    """GB/s of one large read (a sum over `megabytes`), best of five: the memory roofline's bandwidth."""
    data = torch.ones(megabytes * 2**20 // 4, device=device)
    best = float("inf")
    for _ in range(5):
        started = _clock(device)
        data.sum()
        best = min(best, _clock(device) - started)
    return data.numel() * 4 / best / 1e9


def _pass_runner(
    target: LoadedModel, mode: str, batch_size: int, context: int, vocab: int, widest: int
) -> Callable[[int], float]:
    """A function timing one pass of `width` new tokens per row on `context` cached ones, then rolling back."""
    model, device = target.model, target.device
    prompt = torch.randint(0, vocab, (batch_size, context), device=device)  # [B, context]
    if MODES[mode] == "on":
        fast = target_passes(model, "on").fast
        cache = fast.new_cache(context + widest + 1, batch_size)
        fast.forward(prompt, cache)

        def run(width: int) -> float:
            ids = torch.randint(0, vocab, (batch_size, width), device=device)  # [B, T]
            started = _clock(device)
            fast.forward(ids, cache)
            elapsed = _clock(device) - started
            cache.keep(context)
            return elapsed

        return run
    caches = []
    for row in range(batch_size):
        caches.append(new_cache(model))
        cached_forward(model, prompt[row].tolist(), caches[-1], logits_to_keep=1)
    if batch_size == 1:
        cache = caches[0]

        def run(width: int) -> float:
            tokens = torch.randint(0, vocab, (width,)).tolist()
            started = _clock(device)
            cached_forward(model, tokens, cache)
            elapsed = _clock(device) - started
            trim_cache(cache, context)
            return elapsed

        return run
    cache, valid = stack_caches(caches, new_cache(model), device)

    def run(width: int) -> float:
        ids = torch.randint(0, vocab, (batch_size, width), device=device)  # [B, T]
        mask = torch.cat([valid, torch.ones(batch_size, width, dtype=torch.bool, device=device)], dim=1)
        positions = context + torch.arange(width, device=device)[None, :].expand(batch_size, width)  # [B, T]
        started = _clock(device)
        with torch.inference_mode():
            batched_forward(model, ids, mask, positions, cache)
        elapsed = _clock(device) - started
        trim_cache(cache, context)
        return elapsed

    return run


def _plain_speeds(target: LoadedModel, modes: list[str], vocab: int, new_tokens: int, repeats: int, seed: int) -> dict:
    """Plain greedy decoding tokens/s of the engine in each mode (median over alternating repeats)."""
    engines = {mode: SpeculativeEngine(target.model, set(), target.facts.max_context, MODES[mode]) for mode in modes}
    prompt = torch.randint(0, vocab, (32,), generator=torch.Generator().manual_seed(seed)).tolist()
    settings = GenerationSettings(max_new_tokens=new_tokens, draft_len=0)
    speeds: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, engine in engines.items():
            generation = engine.generate(prompt, None, settings).run()
            speeds[mode].append(len(generation.output_ids) / generation.decode_s)
    return {mode: statistics.median(values) for mode, values in speeds.items()}


def _profile(run: Callable[[int], float], width: int, rows: int = 12) -> list[dict]:
    """The operators taking most self time over a few passes of `width` tokens."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as recorded:
        for _ in range(5):
            run(width)
    events = sorted(recorded.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    return [
        {"op": e.key, "self_ms_per_pass": e.self_cpu_time_total / 1000 / 5, "calls_per_pass": e.count / 5}
        for e in events
    ]
