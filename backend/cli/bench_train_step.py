"""`bench train-step`: seconds per training step of a drafter kind in fp32 and under bf16 autocast,
interleaved on one batch. The measurement is backend/training/step_timing.py's; this module parses and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from backend.cli.arg_types import json_object
from backend.cli.common import add_target_args
from backend.core.errors import SpecScopeError


def add_bench_train_step_parser(bench) -> None:
    timing = bench.add_parser(
        "train-step",
        help="seconds per drafter training step, fp32 beside bf16 autocast",
        description="Times the training loop's step (loss, backward, AdamW) of one kind on a batch of random "
        "tokens with the target's hidden states, fp32 and bf16 autocast alternating; medians and the ratio.",
    )
    timing.add_argument("--kind", default="eagle3", help="eagle3, mtp, dflash, dspark or draft-model")
    timing.add_argument("--rows", type=int, default=8, help="windows per batch")
    timing.add_argument("--window", type=int, default=256, help="tokens per window")
    timing.add_argument("--repeats", type=int, default=3)
    timing.add_argument(
        "--settings", type=json_object, default={}, help="JSON object of the mechanism's settings, as train takes it"
    )
    add_target_args(timing)
    timing.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    timing.set_defaults(handler=bench_train_step_command)


def bench_train_step_command(args: argparse.Namespace) -> int:
    from backend.cli.common import load_target
    from backend.training.card import threads_text
    from backend.training.kinds import kind_named
    from backend.training.loop import native_bf16
    from backend.training.step_timing import time_training_steps

    kind = kind_named(args.kind)
    if min(args.rows, args.window, args.repeats) < 1 or args.window < 2:
        raise SpecScopeError("--rows and --repeats must be at least 1 and --window at least 2")
    target = load_target(args)
    slow = "" if native_bf16(target.device) else " (bf16 is emulated here: its steps may take 20x as long as fp32's)"
    print(
        f"timing {1 + args.repeats} {kind.KIND} steps of {args.rows} x {args.window} tokens per precision{slow} ...",
        file=sys.stderr,
        flush=True,
    )
    report = time_training_steps(kind, target, args.settings, args.rows, args.window, args.repeats)
    native = "in hardware" if report["native_bf16"] else "emulated (no native bf16 on this device)"
    print(
        f"{report['kind']} training step, {report['rows']} x {report['window']} tokens, on {report['device']} "
        f"({threads_text(report['threads'])}; bf16 {native}), median of {report['repeats']}"
    )
    print(f"{'precision':<12}{'s/step':>9}{'tok/s':>10}{'vs fp32':>9}")
    for row in report["results"]:
        print(
            f"{row['precision']:<12}{row['seconds']:>9.3f}{row['window_tokens_per_s']:>10.0f}{row['vs_first']:>8.2f}x"
        )
    if args.json:
        print(json.dumps(report))
    return 0
