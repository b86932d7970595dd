"""`bench sweep`: every drafter x draft length x batch size over a prompt suite, measured with the
batched engine and stored as sweep points (and every row's run and steps) in the run store.

For each batch size B the prompts are decoded in batches of B (static batching; a finished row
leaves its batch). D = 0 at each B is the baseline. Every row's output is checked against the
prompt's single-sequence greedy output. Per configuration it records, overall and per category and
prompt-length split: AL with a 95% bootstrap CI over prompts, the acceptance histogram, survival and
conditional per-position acceptance, mean draft and verify time per step, ρ, throughput (generated
tokens/s across the batch, prefill included), interactivity (tokens/s per user = 1 / mean TPOT),
and time to first token. Multi-turn prompts contribute their first turn.

Knows nothing about HTTP or printing; `progress(label, done, total)` reports as it goes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from backend.core.batch import BatchEngine, RowResult
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.core.metrics import acceptance_stats, count_acceptance, measured_rho
from backend.core.models import LoadedModel
from backend.core.verify import SamplingParams
from backend.drafters import REGISTRY, TREE_DRAFTERS, DrafterOptions, all_options, build_drafter
from backend.lab.analysis import bootstrap_al_ci, pareto_frontier
from backend.lab.labels import variant_parts
from backend.lab.prompts import Question, first_turn_ids
from backend.lab.recorder import RunPlan, RunRecorder, software
from backend.lab.store import RunStore

SHORT_BELOW = 512  # prompt tokens: short < 512 <= medium < 2048 <= long
LONG_FROM = 2048


class SweepStopped(Exception):
    """Raised by a progress callback to stop a sweep (its client went away, or the user pressed Ctrl-C)."""


def split_of(prompt_tokens: int) -> str:
    return "short" if prompt_tokens < SHORT_BELOW else ("long" if prompt_tokens >= LONG_FROM else "medium")


@dataclass
class SweepRow:
    question: Question
    result: RowResult
    lossless: bool | None  # None: sampled, so there is no single output to reproduce

    @property
    def split(self) -> str:
        return split_of(len(self.result.prompt_ids))


@dataclass
class _Sweeping:
    """What every precision of one sweep shares while it runs."""

    sweep_id: str
    questions: list[Question]
    prompts: list[list[int]]
    configs: list[tuple]
    batch_sizes: list[int]
    max_new_tokens: int
    options: DrafterOptions
    tree_topk: int
    store: RunStore | None
    progress: Callable[[str, int, int], None]
    total: int
    tag_dtype: bool  # several precisions: each configuration's variant names its dtype, fp32's too
    done: int = 0

    def advance(self, label: str, rows: int) -> None:
        self.done += rows
        self.progress(label, self.done, self.total)


def run_sweep(
    target: LoadedModel,
    questions: list[Question],
    drafters: list[str],
    draft_lens: list[int | str],
    batch_sizes: list[int],
    max_new_tokens: int,
    options: DrafterOptions,
    store: RunStore | None,
    progress: Callable[[str, int, int], None] = lambda label, done, total: None,
    settings_record: dict | None = None,
    temperatures: Sequence[float] = (0.0,),
    option_values: Mapping[str, Sequence] | None = None,
    tree_budgets: Sequence[int] = (0,),
    tree_topk: int = 4,
    min_confidences: Sequence[float] = (0.0,),
    other_precisions: Sequence[LoadedModel] = (),
) -> dict:
    """Run the grid; return {"sweep_id", "points", "frontier", "by_category"} (and store it all).

    Besides drafters, D and B the grid spans `temperatures` (plain decoding is measured at each),
    `option_values` (drafter option name -> values; each drafter sweeps the options it has, the rest
    keep `options`), `tree_budgets` (0 = chains; drafters that build trees draft at each budget),
    `min_confidences` (chains' confidence stops, 0 = none) and `other_precisions` (the same target
    loaded in other dtypes, each swept whole and checked against its own plain decoding). A
    configuration that varies any carries a `variant` label ('T=0.7, ngram_max=2, tree=16',
    'conf=0.35', 'bfloat16')."""
    option_values = check_option_values(drafters, option_values or {})
    precisions = [target, *other_precisions]
    prompts = [first_turn_ids(target.tokenizer, q) for q in questions]
    configs = sweep_grid(drafters, draft_lens, temperatures, option_values, tree_budgets, min_confidences)
    total = len(precisions) * (len(prompts) + len(batch_sizes) * len(configs) * len(prompts))
    sweep = _Sweeping(
        uuid.uuid4().hex,
        questions,
        prompts,
        configs,
        batch_sizes,
        max_new_tokens,
        options,
        tree_topk,
        store,
        progress,
        total,
        tag_dtype=len(precisions) > 1,
    )
    if store is not None:
        store.start_sweep(sweep.sweep_id, target.spec, target.fingerprint, str(target.device), settings_record or {})
    points, by_category = [], []
    try:
        for each in precisions:
            overall, parts = _sweep_precision(each, sweep)
            points += overall
            by_category += parts
    except BaseException as error:
        if store is not None:
            stopped = isinstance(error, SweepStopped | KeyboardInterrupt)
            store.finish_sweep(sweep.sweep_id, "cancelled" if stopped else "failed")
        raise
    if store is not None:
        store.finish_sweep(sweep.sweep_id, "complete")
    keys = (
        "drafter",
        "variant",
        "draft_len",
        "batch_size",
        "throughput_tps",
        "interactivity_tps",
        "al",
        "al_ci_low",
        "al_ci_high",
        "lossless",
    )
    slim = [{k: p[k] for k in keys} for p in points]
    return {
        "sweep_id": sweep.sweep_id,
        "points": slim,
        "frontier": pareto_frontier(slim),
        "details": points,
        "by_category": by_category,
    }


def _sweep_precision(target: LoadedModel, sweep: _Sweeping) -> tuple[list[dict], list[dict]]:
    """The whole grid on one loaded target (one dtype): its overall points and its category and split
    points, stored as they come."""
    engine = SpeculativeEngine(target.model, target.eos_token_ids, target.facts.max_context, target.compile)
    engine.passes.warm_up(lambda label: sweep.progress(label, sweep.done, sweep.total), batched=True)
    batch = BatchEngine(engine)
    recorder = RunRecorder(sweep.store, target) if sweep.store is not None else None
    provenance = {key: software()[key] for key in ("specscope_version", "git_commit")} | target.precision
    # a precision other than fp32 (or several) is part of what a configuration is: its series stay apart
    dtype_part = [provenance["dtype"]] if sweep.tag_dtype or provenance["dtype"] != "float32" else []
    reference = []  # the single-sequence greedy outputs every greedy row must reproduce
    plain = GenerationSettings(sweep.max_new_tokens, draft_len=0)
    for prompt in sweep.prompts:
        reference.append(engine.generate(prompt, None, plain).run().output_ids)
        sweep.advance("reference", 1)
    points, by_category = [], []
    for size in sweep.batch_sizes:
        for temperature, name, draft_len, combo, budget, confident in sweep.configs:
            drafter = build_drafter(name, target, dataclasses.replace(sweep.options, **combo))
            settings = GenerationSettings(
                max_new_tokens=sweep.max_new_tokens,
                draft_len=draft_len,
                sampling=SamplingParams(temperature),
                tree_budget=budget,
                tree_topk=sweep.tree_topk,
                min_confidence=confident,
            )
            rows: list[SweepRow] = []
            wall = prefill = 0.0
            variant = ", ".join([*variant_parts(temperature, combo, budget, confident), *dtype_part]) or None
            for start in range(0, len(sweep.prompts), size):
                result = batch.generate(sweep.prompts[start : start + size], drafter, settings)
                wall += result.wall_s
                prefill += result.prefill_s
                for offset, row in enumerate(result.rows):
                    index = start + offset
                    same = row.output_ids == reference[index] if temperature == 0 else None
                    rows.append(SweepRow(sweep.questions[index], row, same))
                label = f"{name}@{draft_len} B={size}" + (f" [{variant}]" if variant else "")
                sweep.advance(label, len(result.rows))
            config = {
                "drafter": name,
                "draft_len": draft_len,
                "batch_size": size,
                "compile": engine.compile,
                "temperature": temperature,
                "variant": variant,
                "drafter_options": json.dumps(combo),
                "tree_budget": budget,
                "tree_topk": sweep.tree_topk if budget else None,
                "min_confidence": confident,
                "dtype": provenance["dtype"],
            }
            overall = summarise(rows, wall, config, "all", "all")
            overall["decode_throughput_tps"] = overall["new_tokens"] / (wall - prefill) if wall > prefill else None
            parts = [
                summarise([r for r in rows if r.question.category == c], None, config, c, "all")
                for c in sorted({r.question.category for r in rows})
            ]
            parts += [
                summarise([r for r in rows if r.split == s], None, config, "all", s)
                for s in sorted({r.split for r in rows})
            ]
            points.append(overall)
            by_category += parts
            if sweep.store is not None:
                _store_rows(recorder, sweep.sweep_id, rows, config, sweep.max_new_tokens)
                sweep.store.add_sweep_points(sweep.sweep_id, [{**point, **provenance} for point in (overall, *parts)])
    return points, by_category


def sweep_grid(
    drafters: Sequence[str],
    draft_lens: Sequence[int | str],
    temperatures: Sequence[float],
    option_values: Mapping[str, Sequence],
    tree_budgets: Sequence[int],
    min_confidences: Sequence[float],
) -> list[tuple]:
    """The sweep's configurations, (temperature, drafter, D, swept options, tree budget, confidence stop):
    plain decoding once per temperature (also when asked for by name), trees only for drafters that build
    them, confidence stops only for chains."""
    return [
        (t, name, d, combo, budget, confident)
        for t in temperatures
        for name in dict.fromkeys(["none", *drafters])
        for combo in option_grid(name, option_values)
        for d in ([0] if name == "none" else [d for d in draft_lens if d != 0])
        for budget in (tree_budgets if name in TREE_DRAFTERS else (0,))
        for confident in (min_confidences if name != "none" and not budget else (0.0,))
    ]


def check_option_values(drafters: Sequence[str], option_values: Mapping[str, Sequence]) -> dict[str, list]:
    """The drafter option values to sweep, each converted and checked against its registry bounds; a
    clear error for an unknown option, an empty list, or an option none of `drafters` has."""
    infos = {info.name: info for info in all_options()}
    checked = {}
    for name, values in option_values.items():
        key = name.replace("-", "_")
        if key not in infos:
            raise SpecScopeError(f"unknown drafter option '{name}': choose from {', '.join(sorted(infos))}")
        users = [d for d in drafters if d in REGISTRY and key in _option_names(d)]
        if not users:
            raise SpecScopeError(f"no drafter swept has option '{key}' (drafters: {', '.join(drafters)})")
        if not values:
            raise SpecScopeError(f"option '{key}' needs at least one value")
        try:
            checked[key] = [infos[key].parse(str(value)) for value in values]  # 2.0 is no int
        except ValueError as error:
            raise SpecScopeError(str(error)) from error
    folders = [Path(str(path)).name for path in checked.get("drafter_path", [])]
    shared = sorted({name for name in folders if folders.count(name) > 1})
    if shared:
        raise SpecScopeError(
            f"two drafter_path folders are both named '{shared[0]}', the name that labels their results: "
            "give one of them another folder name"
        )
    return checked


def _option_names(drafter: str) -> set[str]:
    return {f.name for f in dataclasses.fields(REGISTRY[drafter].options)}


def option_grid(drafter: str, option_values: Mapping[str, list]) -> list[dict]:
    """Every combination of the swept values of the options `drafter` has ([{}] when it has none)."""
    if drafter not in REGISTRY:
        return [{}]
    names = [name for name in option_values if name in _option_names(drafter)]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(option_values[n] for n in names))]


def summarise(rows: list[SweepRow], wall_s: float | None, config: dict, category: str, split: str) -> dict:
    """One sweep point from its rows. Throughput needs the batches' wall time, so only the overall
    point of a configuration has it; category and split points carry the acceptance figures."""
    steps = [step for row in rows for step in row.result.steps]
    stats = acceptance_stats(steps)
    counters = [count_acceptance(row.result.steps) for row in rows]
    al, low, high = bootstrap_al_ci([(counter.accepted_tokens, counter.drafts) for counter in counters])
    tpots = [row.result.time_per_output_token for row in rows if row.result.time_per_output_token]
    new_tokens = sum(len(row.result.output_ids) for row in rows)
    return {
        **config,
        "category": category,
        "split": split,
        "prompts": len(rows),
        "new_tokens": new_tokens,
        "wall_s": wall_s,
        "throughput_tps": new_tokens / wall_s if wall_s else None,
        "decode_throughput_tps": None,
        "interactivity_tps": 1.0 / (sum(tpots) / len(tpots)) if tpots and wall_s else None,
        "ttft_s": sum(row.result.first_token_s for row in rows) / len(rows) if rows and wall_s else None,
        "al": al if stats.drafting_steps else stats.al,
        "al_ci_low": low,
        "al_ci_high": high,
        "acceptance_rate": stats.acceptance_rate,
        "histogram": stats.histogram,
        "survival": stats.survival,
        "conditional": [c if c is not None else float("nan") for c in stats.conditional],
        "draft_s_mean": sum(s.draft_s for s in steps) / len(steps) if steps else None,
        "verify_s_mean": sum(s.verify_s for s in steps) / len(steps) if steps else None,
        "rho": measured_rho(steps),
        "lossless": None if any(row.lossless is None for row in rows) else all(row.lossless for row in rows),
    }


def _store_rows(recorder: RunRecorder, sweep_id: str, rows: list[SweepRow], config: dict, max_new_tokens: int) -> None:
    """Every row as a run (kind 'sweep', grouped by the sweep id) with its steps."""
    for row in rows:
        run_id = recorder.start(
            RunPlan(
                kind="sweep",
                turns=[row.question.turns[0]],
                drafter=config["drafter"],
                draft_len=config["draft_len"],
                max_new_tokens=max_new_tokens,
                drafter_options=json.loads(config["drafter_options"]),
                sampling=SamplingParams(config["temperature"]),
                question_id=str(row.question.question_id),
                category=row.question.category,
                group_id=sweep_id,
                batch_size=config["batch_size"],
                split=row.split,
                tree_budget=config["tree_budget"],
                tree_topk=config["tree_topk"],
                min_confidence=config["min_confidence"],
                variant=config["variant"],
            )
        )
        recorder.add_steps(run_id, [{"turn": 0, **step.to_dict()} for step in row.result.steps])
        recorder.finish(run_id, row.result.steps, len(row.result.prompt_ids), row.result.finish_reason)
