"""`codesign`: the draft-length rules for a target (G, D = 128/G - 1, the D ladder) next to the speedups
stored sweeps measured. The analysis is backend/lab/codesign.py's; this module parses, asks the worker (or
reads the store file when none runs) and prints.
"""

from __future__ import annotations

import argparse
import json
import os

from backend.cli.common import quiet_libraries
from backend.lab.hints import SWEEP_HINT


def add_codesign_parser(commands) -> None:
    codesign = commands.add_parser(
        "codesign",
        help="the draft-length rules for a target, next to measurements",
        description="G, D = 128/G - 1, the D ladder, predicted vs measured speedup by D "
        "and the recommended D per batch size from stored sweeps.",
    )
    codesign.add_argument("--target", default="default")
    codesign.add_argument("--drafter", help="the drafter to analyse (default: the fastest measured)")
    codesign.add_argument("--db", help="DuckDB file when no worker is running (default $SPECSCOPE_DB)")
    codesign.add_argument("--json", action="store_true")
    codesign.set_defaults(handler=codesign_command)


def codesign_command(args: argparse.Namespace) -> int:
    from backend.lab.codesign import codesign_report
    from backend.serving.client import WorkerClient, WorkerError
    from backend.serving.discovery import published_url

    quiet_libraries()
    try:  # the worker that holds the store answers with its own analysis (the reference where nothing is stored)
        report = WorkerClient(os.environ.get("SPECSCOPE_WORKER_URL") or published_url(args.db)).codesign(
            args.target, args.drafter
        )
    except WorkerError:
        report = codesign_report(*_codesign_inputs(args), drafter=args.drafter)
    print(format_codesign(report))
    if args.json:
        print(json.dumps(report))
    return 0


def _codesign_inputs(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """The target's config facts and its stored sweep points, read from the store file (no worker)."""
    from backend.cli.bench import open_store
    from backend.core.models import config_facts

    store = open_store(args.db)
    points = store.sweep_points(target=args.target, reference=False).to_dict(orient="records")
    store.close()
    return config_facts(args.target), points


def _figure(value: float | None, spec: str, unit: str = "") -> str:
    """A figure as `spec` formats it; "-" where there is none (a serving engine reports no ρ)."""
    return "-" if value is None else f"{value:{spec}}{unit}"


def format_codesign(report: dict) -> str:
    ladder = ", ".join(map(str, report["d_ladder"])) or f"none up to {report['ladder_cap']}"
    lines = [
        f"G = {report['num_attention_heads']} query heads / {report['num_key_value_heads']} KV heads = {report['G']:g}",
        f"start where attention dominates: D = 128/G - 1 = {report['d_start']:.2f}, "
        f"suggested D = {report['d_suggested']} ({report['rounding']})",
        f"D with G x (1 + D) a multiple of 128: {ladder}",
    ]
    if report["ladder_note"]:
        lines.append(report["ladder_note"])
        lines.append(
            "nearest widths: "
            + ", ".join(f"D = {r['D']} ({100 * r['fill']:.0f}% of {r['tiles']} tiles)" for r in report["rungs"])
        )
    if "measured" in report:
        lines += [
            "",
            f"drafter {report['drafter']}, measured rho = {_figure(report['rho'], '.4f')} (batch size 1):",
            f"{'D':>4}{'AL':>7}{'predicted':>11}{'measured':>10}",
        ]
        for d in sorted(report["measured"], key=int):
            al, predicted = _figure(report["al"][d], ".2f"), _figure(report["predicted"][d], ".2f", "x")
            lines.append(f"{d:>4}{al:>7}{predicted:>11}{report['measured'][d]:>9.2f}x")
    else:
        lines += ["", f"no sweep stored for this target yet: run `{SWEEP_HINT}` to measure"]
    if report.get("reference"):
        lines.insert(0, f"(no sweep of your own for this target: measured points from the {report['reference']})")
    if report.get("recommended_d"):
        lines += [
            "",
            "recommended D by batch size (highest measured throughput): "
            + ", ".join(f"B={b}: {d}" for b, d in report["recommended_d"].items()),
        ]
    for engine, snippet in report.get("snippets", {}).items():
        lines += [f"{engine}: {snippet}"]
    if report.get("snippets_note"):
        lines += [report["snippets_note"]]
    return "\n".join(lines)
