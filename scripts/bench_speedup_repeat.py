"""How repeatable the Live page's "speedup vs plain" is: starts a worker on the default model (as
`make run` does) and sends the same Live request to it several times, one after another, through the
same client and endpoint the page uses. Each run's speedup divides by plain decoding measured in that
same job (interleaved with the drafting lane); the script prints each run's figures, then the ratio of
the largest speedup to the smallest. On an idle machine two runs should agree within 10%.

    python scripts/bench_speedup_repeat.py [--drafter ngram] [--draft-len 4] [--max-new-tokens 128]
        [--repeats 2] [--compile auto] [--target default] [--device auto] [--dtype auto] [--allow-remote-code]

A drafter that learns across requests (suffix) starts each run warmer than the last (the previous
output is in its global tree); the memory it started with is printed, so such a difference is seen
for what it is. The default, ngram, has no such memory.

Knows nothing about the pages; the figures are this machine's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.cli.common import add_target_args  # noqa: E402
from backend.lab.prompts import DEFAULT_SUITE, load_suite  # noqa: E402
from backend.serving.bench_worker import load_flags, start_worker  # noqa: E402
from backend.serving.client import WorkerClient  # noqa: E402

TOLERANCE = 0.10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_target_args(parser)
    parser.add_argument("--drafter", default="ngram")
    parser.add_argument("--draft-len", default="4", help="an integer D, or auto")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--category", default="code_editing", help="the suite category whose first prompt is used")
    parser.add_argument("--compile", default="auto", choices=["auto", "on", "off"], help="the worker's --compile")
    return parser.parse_args(argv)


def one_run(client: WorkerClient, body: dict) -> dict:
    """The figures of one Live request: its summary, with the drafter memory it started with."""
    start = summary = None
    for record in client.generate(**body):
        if record["type"] == "start":
            start = record
        elif record["type"] == "summary":
            summary = record
    if summary is None or not summary.get("speedup"):
        raise RuntimeError("the worker sent no speedup: was plain decoding measured?")
    return {**summary, "memory": (start or {}).get("memory")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prompt = next(q for q in load_suite(DEFAULT_SUITE) if q.category == args.category).turns[0]
    draft_len = args.draft_len if args.draft_len == "auto" else int(args.draft_len)
    body = {
        "prompt": prompt,
        "drafter": args.drafter,
        "draft_len": draft_len,
        "max_new_tokens": args.max_new_tokens,
    }
    print(f"starting a worker on {args.target} (compile {args.compile}, device {args.device}) ...", flush=True)
    process, url = start_worker(
        args.target, args.device, args.compile, loading=load_flags(args.dtype, args.allow_remote_code)
    )
    client = WorkerClient(url)
    try:
        runs = [one_run(client, body) for _ in range(args.repeats)]
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
    print(f"{args.drafter} D={args.draft_len}, {args.max_new_tokens} new tokens, {args.category} prompt")
    print("run  speedup  tokens/s  plain tokens/s  plain measured (UTC)       AL    tokens  same as plain  memory")
    for number, run in enumerate(runs, 1):
        identity = run["identity"] or {}
        memory = "-" if run["memory"] is None else f"{run['memory']['sequences']} outputs"
        print(
            f"{number:>3}  {run['speedup']:6.2f}x  {run['tokens_per_s']:8.1f}  {run['baseline_tokens_per_s']:14.1f}  "
            f"{run['baseline_measured_at']:<25}  {run['al']:4.2f}  {run['new_tokens']:>6}  "
            f"{'yes' if identity.get('identical') else 'no':>13}  "
            f"{memory}"
        )
    speedups = [run["speedup"] for run in runs]
    ratio = max(speedups) / min(speedups)
    verdict = "within" if ratio <= 1 + TOLERANCE else "outside"
    print(f"largest / smallest speedup: {ratio:.3f} ({verdict} the {TOLERANCE:.0%} band)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
