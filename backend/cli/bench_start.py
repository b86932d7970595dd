"""`bench start`: seconds from launching the worker to its ready /health, with compilation off, then on
for a first start (an empty inductor cache) and a later one (the same cache). The measurement is
backend/serving/bench_worker.py's; this module parses and prints."""

from __future__ import annotations

import argparse
import json

from backend.cli.common import add_target_args, quiet_libraries


def add_bench_start_parser(bench) -> None:
    start = bench.add_parser(
        "start",
        help="worker start-up time, compiled (first and later start) and not",
        description="Launches the worker three times on one new inductor cache folder (--compile off, "
        "then on twice) and times each from launch to ready (target loaded, graphs built and warmed).",
    )
    add_target_args(start)
    start.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    start.set_defaults(handler=bench_start_command)


def bench_start_command(args: argparse.Namespace) -> int:
    from backend.serving.bench_worker import start_times

    quiet_libraries()
    times = start_times(args.target, args.device, args.dtype, args.allow_remote_code)
    for row in times:
        print(f"--compile {row['compile']:<3} {row['start']:<5} start: ready after {row['seconds']:.1f} s")
    if args.json:
        print(json.dumps({"target": args.target, "starts": times}))
    return 0
