"""`bench engine`: measure a running serving engine (vLLM, SGLang, TensorRT-LLM's trtllm-serve or
llama.cpp's llama-server) on the suite's prompts, one point per concurrency, with the same figures as
`bench sweep` (throughput, interactivity, TTFT, TPOT, AL). D is a server-start option in these engines:
either measure a server already running (--url), or give --launch, a command template with {draft_len}
and {port}, and --draft-lens, and one server per D is started, measured and stopped.

    python -m backend bench engine --engine vllm --url http://localhost:8000 --concurrency 1,4,16
    python -m backend bench engine --engine vllm --draft-lens 2,4 --launch "vllm serve MODEL --port {port}
        --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": {draft_len}}'"
"""

from __future__ import annotations

import argparse
import json

import httpx

from backend.core.errors import SpecScopeError
from backend.engines.adapters import ADAPTERS, adapter_for
from backend.engines.launch import launched_server
from backend.engines.measure import measure_point
from backend.lab.prompts import DEFAULT_SUITE, load_suite


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated concurrency levels, got {text!r}") from None
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError("concurrency levels must be whole numbers of at least 1")
    return levels


def add_engine_parser(bench) -> None:
    engine = bench.add_parser(
        "engine",
        help="measure a running vLLM / SGLang / TensorRT-LLM / llama.cpp server at several concurrencies",
        description=__doc__.split("\n\n")[0],
    )
    engine.add_argument("--engine", required=True, choices=sorted(ADAPTERS))
    where = engine.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server's base URL, e.g. http://localhost:8000")
    where.add_argument("--launch", help="a server command template with {draft_len} and {port} (needs --draft-lens)")
    engine.add_argument("--draft-lens", type=_levels, help="with --launch: the D values, one server each")
    engine.add_argument("--launch-timeout", type=float, default=1800.0, help="seconds a launched server may take")
    engine.add_argument("--model", help="the model name the OpenAI-compatible engines expect")
    engine.add_argument("--token", help="a bearer token, where the server needs one")
    engine.add_argument("--suite", default=str(DEFAULT_SUITE), help="a question.jsonl suite (default: shipped)")
    engine.add_argument("--per-category", type=int, default=2)
    engine.add_argument("--concurrency", type=_levels, default=[1, 4, 16])
    engine.add_argument("--max-new-tokens", type=int, default=128)
    engine.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    engine.set_defaults(handler=bench_engine)


def bench_engine(args: argparse.Namespace) -> int:
    if args.launch and not args.draft_lens:
        raise SpecScopeError("--launch needs --draft-lens: the D values to start a server for")
    prompts = [q.turns[0] for q in load_suite(args.suite, per_category=args.per_category)]
    print(
        f"{'D':>4}{'concurrency':>12}{'tok/s':>9}{'tok/s/user':>12}{'TTFT p50 ms':>13}{'TPOT p50 ms':>13}"
        f"{'AL':>7}  AL from"
    )
    points = []
    for draft_len in args.draft_lens if args.launch else [None]:
        try:
            if args.launch:
                with launched_server(args.launch, draft_len, args.launch_timeout) as url:
                    points += _measure_levels(args, url, draft_len, prompts)
            else:
                points += _measure_levels(args, args.url, None, prompts)
        except httpx.HTTPError as error:
            raise SpecScopeError(f"cannot measure the {args.engine} server: {error}") from error
        except RuntimeError as error:  # a refused request or a server that did not start (the message says why)
            raise SpecScopeError(str(error)) from error
    if args.json:
        print(json.dumps({"engine": args.engine, "url": args.url, "launch": args.launch, "points": points}))
    return 0


def _measure_levels(args: argparse.Namespace, url: str, draft_len: int | None, prompts: list[str]) -> list[dict]:
    """One point per concurrency level against the server at `url` (a fresh adapter: its own counters)."""
    adapter = adapter_for(args.engine)
    points = []
    for level in args.concurrency:
        point = {"draft_len": draft_len, "url": url}
        point |= measure_point(url, adapter, prompts, level, args.max_new_tokens, args.model, args.token)
        points.append(point)
        al = f"{point['al']:.2f}" if point["al"] is not None else "-"
        print(
            f"{draft_len if draft_len is not None else '-':>4}{level:>12}{point['throughput_tps']:>9.1f}"
            f"{point['interactivity_tps'] or 0:>12.1f}{point['ttft_ms_p50'] or 0:>13.0f}"
            f"{point['tpot_ms_p50'] or 0:>13.1f}{al:>7}  {point['al_from'] or '-'}",
            flush=True,
        )
    return points
