"""Analysis of measured points: bootstrap confidence intervals for AL, the throughput-interactivity
Pareto frontier, interpolation at matched interactivity, and the draft-length rules
(D = 128/G - 1, the ladder where G x (1 + D) fills 128-wide attention tiles, speedup AL/(1 + ρD)).

Pure functions on numbers and dicts; knows nothing about models, the store or the UI.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from backend.core.metrics import AcceptanceCounter, acceptance_length

TILE = 128  # attention-kernel tile width in the rule D = 128/G - 1


def bootstrap_al_ci(
    per_prompt: Sequence[tuple[int, int]], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """AL with a percentile bootstrap CI, resampling prompts (not steps: steps within a prompt are not
    independent). per_prompt: (accepted drafts, drafting steps) of each prompt. Returns (AL, low, high)."""
    data = np.array([p for p in per_prompt if p[1] > 0], dtype=float)  # [n, 2]
    if len(data) == 0:
        return 1.0, 1.0, 1.0
    point = acceptance_length(data[:, 0].sum(), data[:, 1].sum())

    def pooled_al(resampled: np.ndarray) -> np.ndarray:  # [resamples, n, 2] -> [resamples]
        sums = resampled.sum(axis=1)  # [resamples, 2]
        return acceptance_length(sums[:, 0], sums[:, 1])

    return float(point), *_percentile_ci(data, pooled_al, resamples, level, seed)


def paired_gain_ci(
    new: Sequence[float], old: Sequence[float], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """The mean of new - old over pairs (the same prompts measured with two drafters) with a percentile
    bootstrap CI resampling the pairs. Returns (gain, low, high)."""
    gains = np.asarray(new, dtype=float) - np.asarray(old, dtype=float)  # [n]
    if len(gains) == 0:
        raise ValueError("a paired gain needs at least one pair")

    def mean(resampled: np.ndarray) -> np.ndarray:  # [resamples, n] -> [resamples]
        return resampled.mean(axis=1)

    return float(gains.mean()), *_percentile_ci(gains, mean, resamples, level, seed)


def _percentile_ci(
    data: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], resamples: int, level: float, seed: int
) -> tuple[float, float]:
    """The percentile bootstrap interval of `statistic` over `data` [n, ...]: rows drawn with replacement,
    `resamples` times; statistic maps the resampled [resamples, n, ...] to [resamples]."""
    picks = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))  # [resamples, n]
    samples = statistic(data[picks])  # [resamples]
    tail = (1.0 - level) / 2
    return float(np.quantile(samples, tail)), float(np.quantile(samples, 1 - tail))


def pareto_frontier(points: Sequence[dict], x: str = "interactivity_tps", y: str = "throughput_tps") -> list[dict]:
    """Points no other point beats on both axes (higher is better on both), ordered by x. Points
    missing either figure (one new token has no time per output token) are left out."""
    points = [p for p in points if p[x] is not None and p[y] is not None]
    frontier = []
    for point in points:
        dominated = any(
            other[x] >= point[x] and other[y] >= point[y] and (other[x] > point[x] or other[y] > point[y])
            for other in points
        )
        if not dominated:
            frontier.append(point)
    return sorted(frontier, key=lambda p: p[x])


def interpolate(curve: Sequence[tuple[float, float]], at: float) -> float | None:
    """Linear interpolation on a curve of (x, y); None outside its x range."""
    ordered = sorted(curve)
    if not ordered or at < ordered[0][0] or at > ordered[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(ordered, ordered[1:], strict=False):
        if x0 <= at <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (at - x0) / (x1 - x0)
    return ordered[-1][1]


def matched_interactivity(baseline: Sequence[dict], speculative: Sequence[dict], levels: int = 8) -> list[dict]:
    """Throughput with and without speculation at the same tokens/s per user, as serving dashboards
    compare them: both frontiers are interpolated on the interactivity range they share."""
    base = [(p["interactivity_tps"], p["throughput_tps"]) for p in pareto_frontier(baseline)]
    spec = [(p["interactivity_tps"], p["throughput_tps"]) for p in pareto_frontier(speculative)]
    if not base or not spec:
        return []
    low, high = max(base[0][0], spec[0][0]), min(base[-1][0], spec[-1][0])
    if low > high:
        return []
    rows = []
    for at in np.linspace(low, high, levels) if high > low else [low]:
        off, on = interpolate(base, float(at)), interpolate(spec, float(at))
        rows.append(
            {
                "interactivity_tps": float(at),
                "throughput_off": off,
                "throughput_on": on,
                "gain": on / off if off else None,
            }
        )
    return rows


def d_start(num_attention_heads: int, num_key_value_heads: int) -> float:
    """The starting draft length where attention dominates: D = 128/G - 1."""
    return TILE / (num_attention_heads / num_key_value_heads) - 1


def d_ladder(num_attention_heads: int, num_key_value_heads: int, up_to: int = 64) -> list[int]:
    """D values (1..up_to) for which G x (1 + D) is a multiple of 128, filling attention tiles."""
    g = num_attention_heads / num_key_value_heads
    return [d for d in range(1, up_to + 1) if math.isclose((g * (1 + d)) % TILE, 0.0, abs_tol=1e-9)]


def predicted_speedup(al: float, rho: float, draft_len: int) -> float:
    """The low-latency estimate: speedup ~ AL / (1 + ρ·D) (verification taken as free)."""
    return al / (1 + rho * draft_len)


def recommended_d(points: Sequence[dict]) -> dict[int, str]:
    """For each batch size, the draft length whose measured throughput was highest (D = 0 included)."""
    best: dict[int, dict] = {}
    for point in points:
        size = int(point["batch_size"])
        if size not in best or point["throughput_tps"] > best[size]["throughput_tps"]:
            best[size] = point
    return {size: str(point["draft_len"]) for size, point in sorted(best.items())}


def deployment(point: dict) -> tuple | None:
    """Where a serving engine's point was measured (its engine version and hardware); None for SpecScope's."""
    return (point.get("engine_version"), point.get("device")) if point.get("engine") else None


def plain_of(drafter: str) -> str:
    """The plain decoding a drafter's speedup is measured against: its serving engine's ("vllm/none" for
    "vllm/eagle3"), or SpecScope's ("none")."""
    return f"{drafter.split('/')[0]}/none" if "/" in drafter else "none"


def newest_per_config(points: Sequence[dict]) -> list[dict]:
    """One point per (drafter, variant, D, batch size): the first seen, i.e. the newest sweep's when the points
    come newest first (as the store returns them), among SpecScope's points measured on its newest point's
    path (compiled or eager), so no speedup divides one path by the other; a serving engine's points
    (`engine` set: no compile path) are all candidates, one per deployment (engine version and hardware)."""
    path = next((p.get("compile") for p in points if not p.get("engine")), None)
    seen, kept = set(), []
    for point in (p for p in points if p.get("engine") or p.get("compile") == path):
        key = (point["drafter"], point.get("variant"), str(point["draft_len"]), point["batch_size"], deployment(point))
        if key not in seen:
            seen.add(key)
            kept.append(point)
    return kept


def acceptance_groups(
    runs: Sequence[dict], histogram: Sequence[dict], positions: Sequence[dict], pool_categories: bool = False
) -> list[dict]:
    """Per (drafter, draft_len, category): AL with a bootstrap CI over runs, the acceptance histogram,
    survival and conditional per-position acceptance (metrics.py's counter), from the store's
    acceptance tables (RunStore.acceptance_tables) as lists of records, each group also carrying its
    drafter without the variant (`base_drafter`) and its `tree_budget` (0: chains). pool_categories=True
    merges every category into one group named 'all' (a run has one category, so its runs stay whole)."""

    def key(row: dict) -> tuple:
        return row["drafter"], str(row["draft_len"]), "all" if pool_categories else row["category"]

    groups: dict[tuple, dict] = {}
    for row in runs:
        group = groups.setdefault(
            key(row),
            {
                "runs": [],
                "counter": AcceptanceCounter(),
                "base_drafter": row["base_drafter"],
                "tree_budget": int(row["tree_budget"]),
            },
        )
        group["runs"].append((int(row["accepted"]), int(row["steps"])))
        group["counter"].merge(
            AcceptanceCounter(
                drafts=int(row["steps"]), drafted_tokens=int(row["drafted"]), accepted_tokens=int(row["accepted"])
            )
        )
    for row in histogram:
        accepted = int(row["accepted"])
        groups[key(row)]["counter"].merge(AcceptanceCounter(histogram=[0] * accepted + [int(row["steps"])]))
    for row in positions:
        before = [0] * (int(row["position"]) - 1)
        groups[key(row)]["counter"].merge(
            AcceptanceCounter(
                accepted_per_position=[*before, int(row["accepted"])],
                reached_per_position=[*before, int(row["reached"])],
            )
        )
    result = []
    for (drafter, draft_len, category), group in sorted(groups.items()):
        stats = group["counter"].stats()
        _, low, high = bootstrap_al_ci(group["runs"])
        result.append(
            {
                "drafter": drafter,
                "base_drafter": group["base_drafter"],
                "tree_budget": group["tree_budget"],
                "draft_len": draft_len,
                "category": category,
                "runs": len(group["runs"]),
                "drafting_steps": stats.drafting_steps,
                "al": stats.al,
                "al_ci_low": low,
                "al_ci_high": high,
                "acceptance_rate": stats.acceptance_rate,
                "histogram": stats.histogram,
                "survival": stats.survival,
                "conditional": stats.conditional,
            }
        )
    return result
