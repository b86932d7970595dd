"""The `bench` commands: speed (drafters vs plain decoding and Hugging Face), sweep (drafters x D x
batch sizes into the run store) and stream (the worker's overhead). Parsing lives in main.py; this
module runs the benchmarks and prints their tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from backend.cli.common import drafter_options, load_target, quiet_libraries
from backend.cli.speed_table import format_speed_table, precision_label
from backend.core.errors import SpecScopeError, first_line

if TYPE_CHECKING:
    from backend.core.models import LoadedModel


def _checked_questions(args: argparse.Namespace) -> list:
    """The benchmark's drafters and draft lengths checked, and its prompts (a clear error if there are none)."""
    from backend.core.policy import make_policy
    from backend.drafters import DRAFTER_NAMES
    from backend.lab.prompts import load_suite

    for name in args.drafters:
        if name not in DRAFTER_NAMES or name == "none":
            raise SpecScopeError(f"unknown drafter '{name}': choose from {', '.join(DRAFTER_NAMES[1:])}")
    for draft_len in args.draft_lens:
        make_policy(draft_len, free_drafter=True)
    if getattr(args, "options", None) is not None:
        from backend.lab.sweep import check_option_values

        args.options = check_option_values(args.drafters, dict(args.options))
    return load_suite(args.suite, args.categories, args.limit, args.per_category)


def bench_speed(args: argparse.Namespace) -> int:
    from backend.lab.bench import configs_of, speed_benchmark

    questions = _checked_questions(args)
    target = load_target(args)
    from tqdm import tqdm

    configs = len(configs_of(args.drafters, args.draft_lens, args.tree_budgets, args.min_confidences, args.options))
    runs_per_prompt = 2 + len([d for d in args.draft_lens if d != "auto"]) + configs
    with tqdm(total=len(questions) * runs_per_prompt, file=sys.stderr, unit="run", dynamic_ncols=True) as bar:

        def progress(label: str) -> None:
            bar.set_postfix_str(label)
            bar.update(1)

        report = speed_benchmark(
            target,
            questions,
            args.drafters,
            args.draft_lens,
            args.max_new_tokens,
            drafter_options(args),
            progress,
            tree_budgets=tuple(args.tree_budgets),
            tree_topk=args.tree_topk,
            min_confidences=tuple(args.min_confidences),
            option_values=args.options,
        )
    print(format_speed_table(report))
    if args.json:
        print(json.dumps(report))
    return 0


def bench_forward(args: argparse.Namespace) -> int:
    from backend.core.fast_forward import MAX_COMPILED_WIDTH
    from backend.core.target_passes import compile_mode
    from backend.lab.bench_forward import forward_benchmark, prefill_benchmark

    if max(args.widths) > MAX_COMPILED_WIDTH or args.context < 1 or args.repeats < 1:
        raise SpecScopeError(
            f"widths go up to {MAX_COMPILED_WIDTH} new tokens, and --context and --repeats must be at least 1"
        )
    target = load_target(args)
    modes = ["eager", "compiled"] if compile_mode(target.model, target.compile) == "on" else ["eager"]
    if args.prefill and "compiled" not in modes:
        raise SpecScopeError("--prefill times the compiled path's batched prefill: this target runs eager only")
    report = forward_benchmark(
        target,
        modes,
        args.batch_sizes,
        tuple(args.widths),
        args.context,
        args.repeats,
        profile=args.profile,
        progress=lambda label: print(label, file=sys.stderr, flush=True),
    )
    if args.prefill:
        report["prefill"] = prefill_benchmark(target, _spread_prompts(target, max(args.batch_sizes)), args.batch_sizes)
    print(format_forward_table(report))
    if args.json:
        print(json.dumps(report))
    return 0


def _spread_prompts(target: LoadedModel, count: int) -> list[list[int]]:
    """First turns of `count` suite prompts spread evenly over the suite (so over its categories)."""
    from backend.lab.prompts import DEFAULT_SUITE, first_turn_ids, load_suite

    questions = load_suite(DEFAULT_SUITE)
    step = max(1, len(questions) // count)
    return [first_turn_ids(target.tokenizer, q) for q in questions[::step][:count]]


def format_forward_table(report: dict) -> str:
    lines = [
        f"{report['target']} on {report['device']} ({report['dtype']}; {precision_label(report['cpu_features'])}), "
        f"{report['context']} tokens cached, "
        f"median of {report['repeats']}; memory roofline {report['roofline_tps']:.1f} tok/s "
        f"({report['weight_mb_per_token']:.0f} MB of weights per token at {report['bandwidth_gb_s']:.1f} GB/s)",
        "plain decoding: "
        + ", ".join(f"{mode} {tps:.1f} tok/s" for mode, tps in report["plain_tps"].items())
        + f"; compiled one-row passes ran on {report['graphs']}",
        "",
        f"{'mode':<10}{'B':>4}{'T':>5}{'ms':>9}{'vs T=1':>9}",
    ]
    for row in report["results"]:
        ratio = f"{row['vs_one_token']:.2f}x" if row["vs_one_token"] else "-"
        lines.append(f"{row['mode']:<10}{row['batch_size']:>4}{row['tokens']:>5}{row['ms']:>9.1f}{ratio:>9}")
    if "prefill" in report:
        lines += ["", "first token of a batch of suite prompts, compiled (median s): prefilled one by one / grouped"]
        lines += [
            f"  B={row['batch_size']:<3} {row['prompt_tokens']:>5} prompt tokens  {row['one_by_one_s']:6.2f} s  "
            f"{row['grouped_s']:6.2f} s  {row['speedup']:.2f}x"
            for row in report["prefill"]
        ]
    for mode, by_width in report.get("profile", {}).items():
        for width, rows in by_width.items():
            lines += ["", f"{mode}, T={width}: top operators (self ms per pass, calls per pass)"]
            lines += [f"  {r['self_ms_per_pass']:8.2f} {r['calls_per_pass']:6.0f}  {r['op'][:70]}" for r in rows]
    return "\n".join(lines)


def bench_stream(args: argparse.Namespace) -> int:
    from backend.core.policy import make_policy
    from backend.lab.prompts import load_suite
    from backend.serving.bench_worker import stream_benchmark

    make_policy(args.draft_len, free_drafter=True)
    questions = load_suite(args.suite, args.categories, per_category=args.per_category)
    quiet_libraries()
    report = stream_benchmark(
        args.target,
        questions,
        args.drafter,
        args.draft_len,
        args.max_new_tokens,
        args.repeats,
        args.device,
        args.compile,
        args.dtype,
        args.allow_remote_code,
    )
    memory = report["worker_memory_after_runs_mb"]
    print(
        f"{len(report['rows'])} runs of {args.drafter}@{args.draft_len}: worker stream / in process = "
        f"{report['geomean_worker_over_in_process']:.3f} (geomean); first step record after "
        f"{1000 * report['median_first_step_s']:.0f} ms (median); worker RSS {memory['rss_mb']:.0f} MB "
        f"(peak {memory['peak_rss_mb']:.0f} MB); outputs equal: {report['all_outputs_equal']}"
    )
    if args.json:
        print(json.dumps(report))
    return 0


def _config(point: dict) -> tuple:
    return point["drafter"], point.get("variant"), str(point["draft_len"]), point["batch_size"]


def format_sweep_table(report: dict) -> str:
    frontier = {_config(p) for p in report["frontier"]}
    lines = [
        f"sweep {report['sweep_id']}: {len(report['points'])} configurations (* = on the Pareto frontier; "
        "lossless None: sampled, nothing to compare with)",
        "",
        f"{'drafter':<28}{'D':>20}{'B':>4}{'tok/s':>9}{'tok/s/user':>12}{'AL':>7}{'95% CI':>15}{'lossless':>10}",
    ]
    for p in report["points"]:
        mark = "*" if _config(p) in frontier else " "
        ci = f"{p['al_ci_low']:.2f}-{p['al_ci_high']:.2f}"
        name = p["drafter"] + (f" [{p['variant']}]" if p.get("variant") else "")
        lines.append(
            f"{name:<28}{str(p['draft_len']):>20}{p['batch_size']:>4}{p['throughput_tps']:>9.1f}"
            f"{p['interactivity_tps'] or 0:>12.1f}{p['al']:>7.2f}{ci:>15}{str(p['lossless']):>10} {mark}"
        )
    return "\n".join(lines)


def open_store(path: str | None):
    """The run store file for a command that found no worker; a clear error if a worker holds it."""
    import duckdb

    from backend.lab.store import RunStore

    try:
        return RunStore(path)
    except duckdb.IOException as error:
        if "lock" not in str(error).lower():
            raise SpecScopeError(f"cannot open the run store: {first_line(error)}") from error
        raise SpecScopeError(
            "the run store is open in another process (a worker?): point SPECSCOPE_WORKER_URL at that worker, "
            "or use --db for another file"
        ) from error


def _sweep_locally(args: argparse.Namespace, questions, record: dict, progress, store=None) -> dict:
    """The sweep in this process, into `store` (default: the --db file, closed afterwards)."""
    from backend.drafters import DrafterOptions
    from backend.lab.sweep import run_sweep

    owned = store is None
    store = open_store(args.db) if owned else store
    args.target = args.target or "default"
    target, *others = [load_target(args, dtype) for dtype in args.dtypes or [args.dtype]]
    try:
        return run_sweep(
            target,
            questions,
            args.drafters,
            args.draft_lens,
            args.batch_sizes,
            args.max_new_tokens,
            DrafterOptions(),
            store,
            progress,
            {**record, "max_new_tokens": args.max_new_tokens},
            args.temperatures,
            args.options,
            args.tree_budgets,
            args.tree_topk,
            args.min_confidences,
            others,
        )
    finally:
        if owned:
            store.close()


def _sweep_record(args: argparse.Namespace, questions) -> dict:
    """The settings a sweep is stored with."""
    return {
        "suite": str(args.suite),
        "drafters": args.drafters,
        "draft_lens": args.draft_lens,
        "batch_sizes": args.batch_sizes,
        "temperatures": args.temperatures,
        "options": args.options,
        "tree_budgets": args.tree_budgets,
        "min_confidences": args.min_confidences,
        "dtypes": args.dtypes,
        "categories": args.categories,
        "per_category": args.per_category,
        "prompts": len(questions),
    }


def _progress_bar():
    """A tqdm bar on stderr and the sweep progress callback that drives it."""
    from tqdm import tqdm

    bar = tqdm(file=sys.stderr, unit="row", dynamic_ncols=True)

    def progress(label: str, done: int, total: int) -> None:
        bar.total = total
        bar.set_postfix_str(label)
        bar.update(done - bar.n)

    return bar, progress


def _reachable_worker(args: argparse.Namespace):
    """The worker to store through: $SPECSCOPE_WORKER_URL, else the one holding --db's store (it publishes
    its URL beside it); None when --local was asked for or none answers."""
    from backend.serving.client import WorkerClient, WorkerError
    from backend.serving.discovery import published_url

    if args.local:
        return None
    worker = WorkerClient(os.environ.get("SPECSCOPE_WORKER_URL") or published_url(args.db))
    try:
        worker.health()
    except WorkerError:
        return None
    return worker


SWEEP_DRAFT_LENS = [0, 2, 4, 8]  # bench sweep's D values when none are given


def bench_sweep(args: argparse.Namespace) -> int:
    from backend.serving.client import WorkerError

    if args.engine:
        from backend.cli.engine import check_engine_args, engine_sweep_command

        check_engine_args(args)
        return engine_sweep_command(args, _reachable_worker(args))
    args.draft_lens = args.draft_lens if args.draft_lens is not None else SWEEP_DRAFT_LENS
    worker = _reachable_worker(args)
    questions = _checked_questions(args)
    record = _sweep_record(args, questions)
    bar, progress = _progress_bar()
    with bar:
        if worker is None:
            report = _sweep_locally(args, questions, record, progress)
        else:
            report = None
            body = {
                "questions": [
                    {"question_id": q.question_id, "category": q.category, "turns": list(q.turns)} for q in questions
                ],
                "target": args.target,
                "drafters": args.drafters,
                "draft_lens": args.draft_lens,
                "batch_sizes": args.batch_sizes,
                "max_new_tokens": args.max_new_tokens,
                "temperatures": args.temperatures,
                "options": args.options,
                "tree_budgets": args.tree_budgets,
                "tree_topk": args.tree_topk,
                "min_confidences": args.min_confidences,
                "dtypes": args.dtypes,
                "settings": record,
            }
            try:
                for item in worker.sweep(**body):
                    if item["type"] == "progress":
                        progress(item["label"], item["done"], item["total"])
                    elif item["type"] == "sweep":
                        report = item
            except WorkerError as error:
                raise SpecScopeError(str(error)) from error
            if report is None:
                raise SpecScopeError("the worker ended the sweep without a report")
            print(f"(stored by the worker at {worker.url})", file=sys.stderr)
    print(format_sweep_table(report))
    if args.json:
        print(json.dumps({key: report[key] for key in ("sweep_id", "points", "frontier")}))
    return 0


def bench_reference(args: argparse.Namespace) -> int:
    """The reference sweep, run here into a temporary store, written as Parquet to --out."""
    import tempfile
    import time
    from pathlib import Path

    from backend.lab.recorder import software
    from backend.lab.reference import export_reference, reference_label
    from backend.lab.store import RunStore

    questions = _checked_questions(args)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specscope-reference-") as folder:
        store = RunStore(Path(folder) / "reference.duckdb")
        bar, progress = _progress_bar()
        with bar:
            report = _sweep_locally(args, questions, _sweep_record(args, questions), progress, store)
        device = str(store.sweeps()["device"].iloc[0])
        label = reference_label(device, software())
        files = export_reference(store, report["sweep_id"], args.out, label)
        store.close()
    minutes = (time.perf_counter() - started) / 60
    print(format_sweep_table(report))
    print(f"\n{label}; measured in {minutes:.1f} min", file=sys.stderr)
    for path in files:
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)", file=sys.stderr)
    if args.json:
        print(json.dumps({"sweep_id": report["sweep_id"], "label": label, "minutes": minutes}))
    return 0
