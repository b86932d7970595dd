"""`bench sweep --engine ...`: a sweep against a serving engine (vLLM, SGLang, TensorRT-LLM's trtllm-serve
or llama.cpp's llama-server) on the suite's prompts, one point per (D, concurrency), stored beside
SpecScope's own sweeps (through the worker when one answers, else into the DuckDB file). D is a
server-start option in these engines: either measure a server already running (--url), or give --launch,
a command template with {draft_len} and {port}, and --draft-lens, and one server per D is started,
measured and stopped.

    python -m backend bench sweep --engine vllm --url http://localhost:8000 --concurrency 1,4,16
    python -m backend bench sweep --engine vllm --draft-lens 2,4 --launch "vllm serve MODEL --port {port}
        --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": {draft_len}}'"

The measuring is lab/engine_sweep.py; this module parses, picks where points go, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys

from backend.core.errors import SpecScopeError
from backend.engines.adapters import ADAPTERS
from backend.lab.engine_sweep import EngineSweep, run_engine_sweep
from backend.lab.prompts import load_suite


def add_engine_args(sweep: argparse.ArgumentParser) -> None:
    """The flags `bench sweep` takes to measure a serving engine instead of SpecScope's own."""
    group = sweep.add_argument_group(
        "measuring a serving engine",
        "With --engine, the sweep measures a vLLM / SGLang / TensorRT-LLM / llama.cpp server: D comes from "
        "--draft-lens (one server launched per D) and --batch-sizes are the request concurrencies; "
        "--drafters, --temperatures and --option apply to SpecScope's engine only.",
    )
    group.add_argument("--engine", choices=sorted(ADAPTERS), help="the serving engine to measure")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running server's base URL, e.g. http://localhost:8000")
    where.add_argument("--launch", help="a server command template with {draft_len} and {port}")
    group.add_argument("--server-draft-len", type=int, help="with --url: the D the running server was started with")
    group.add_argument("--method", default="spec", help="the engine's speculative method, for the points' labels")
    group.add_argument("--hardware", help="where the engine runs (default: this machine; with --url, the URL's host)")
    group.add_argument("--model", help="the model name the OpenAI-compatible engines expect in requests")
    group.add_argument("--token", help="a bearer token, where the server needs one")
    group.add_argument("--launch-timeout", type=float, default=1800.0, help="seconds a launched server may take")
    group.add_argument("--resume", metavar="SWEEP_ID", help="measure only what this stored engine sweep lacks")


def engine_sweep_command(args: argparse.Namespace, worker) -> int:
    """`bench sweep --engine`: the points stored through `worker` when one answers, else into the --db file."""
    from backend.cli.bench import open_store
    from backend.serving.client import WorkerError, WorkerSweepSink

    sink = WorkerSweepSink(worker) if worker else open_store(args.db)
    try:
        code = bench_engine_sweep(args, sink)
    except WorkerError as error:
        raise SpecScopeError(str(error)) from error
    finally:
        if worker is None:
            sink.close()
    print(f"(stored {'by the worker at ' + worker.url if worker else 'in ' + str(sink.path)})", file=sys.stderr)
    return code


def check_engine_args(args: argparse.Namespace) -> None:
    """The flags an engine sweep needs, checked before anything starts (one sentence each)."""
    if not (args.url or args.launch):
        raise SpecScopeError("--engine needs --url (a running server) or --launch (a command template)")
    if args.launch and args.draft_lens is None:
        raise SpecScopeError("--launch needs --draft-lens: the D values to start a server for")
    if args.url and args.draft_lens is not None:
        raise SpecScopeError("a running server has one D: give it as --server-draft-len, not --draft-lens")
    if any(not isinstance(d, int) or d < 0 for d in args.draft_lens or []):
        raise SpecScopeError("an engine's D values are whole numbers (a server is started for each)")


def bench_engine_sweep(args: argparse.Namespace, sink) -> int:
    """The engine sweep into `sink` (the store, or the worker's client); its table, and --json's line."""
    questions = load_suite(args.suite, args.categories, args.limit, args.per_category)
    record = {"suite": str(args.suite), "categories": args.categories, "per_category": args.per_category}
    try:
        sweep = EngineSweep(
            engine=args.engine,
            prompts=[q.turns[0] for q in questions],
            concurrency=args.batch_sizes,
            max_new_tokens=args.max_new_tokens,
            url=args.url,
            launch=args.launch,
            draft_lens=args.draft_lens if args.launch else [d for d in [args.server_draft_len] if d is not None],
            method=args.method,
            target=args.target,
            hardware=args.hardware,
            model=args.model,
            token=args.token,
            launch_timeout_s=args.launch_timeout,
            settings=record,
        )
    except ValueError as error:
        raise SpecScopeError(str(error)) from error

    def progress(label: str, done: int, total: int) -> None:
        print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    report = run_engine_sweep(sweep, sink, progress, args.resume)
    print(format_engine_table(report))
    if args.json:
        print(json.dumps(report))
    return 0


def format_engine_table(report: dict) -> str:
    lines = [
        f"engine sweep {report['sweep_id']}: {report['status']}, {len(report['points'])} points measured now",
        "",
        f"{'drafter':<26}{'D':>7}{'conc.':>6}{'tok/s':>9}{'tok/s/user':>12}{'TTFT p50 ms':>13}{'TPOT p50 ms':>13}"
        f"{'AL':>7}  AL from",
    ]
    for p in report["points"]:
        head = f"{p['drafter']:<26}{p['draft_len']:>7}{p['batch_size']:>6}"
        if p["status"] == "failed":
            lines.append(f"{head}  failed: {p['error'].splitlines()[0][:200]}")
            continue
        al = f"{p['al']:.2f}" if p["al"] is not None else "-"
        lines.append(
            f"{head}{p['throughput_tps']:>9.1f}{p['interactivity_tps'] or 0:>12.1f}"
            f"{1000 * (p['ttft_s'] or 0):>13.0f}{1000 * (p['tpot_s_p50'] or 0):>13.1f}{al:>7}  {p['al_from'] or '-'}"
        )
    if report["status"] == "incomplete":
        lines += ["", f"some points failed; measure them again with --resume {report['sweep_id']}"]
    return "\n".join(lines)
