"""`bench engine`: measure a running serving engine (vLLM, SGLang, TensorRT-LLM's trtllm-serve or
llama.cpp's llama-server) on the suite's prompts, one point per concurrency, with the same figures as
`bench sweep` (throughput, interactivity, TTFT, TPOT, AL). The engine's speculative configuration is
whatever it was started with; D is a server-start option, so each D is a server of its own.

    python -m backend bench engine --engine vllm --url http://localhost:8000 --concurrency 1,4,16
"""

from __future__ import annotations

import argparse
import json

import httpx

from backend.core.errors import SpecScopeError
from backend.engines.adapters import ADAPTERS, adapter_for
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
    engine.add_argument("--url", required=True, help="the server's base URL, e.g. http://localhost:8000")
    engine.add_argument("--model", help="the model name the OpenAI-compatible engines expect")
    engine.add_argument("--token", help="a bearer token, where the server needs one")
    engine.add_argument("--suite", default=str(DEFAULT_SUITE), help="a question.jsonl suite (default: shipped)")
    engine.add_argument("--per-category", type=int, default=2)
    engine.add_argument("--concurrency", type=_levels, default=[1, 4, 16])
    engine.add_argument("--max-new-tokens", type=int, default=128)
    engine.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    engine.set_defaults(handler=bench_engine)


def bench_engine(args: argparse.Namespace) -> int:
    prompts = [q.turns[0] for q in load_suite(args.suite, per_category=args.per_category)]
    adapter = adapter_for(args.engine)
    points = []
    print(f"{'concurrency':>11}{'tok/s':>9}{'tok/s/user':>12}{'TTFT p50 ms':>13}{'TPOT p50 ms':>13}{'AL':>7}  AL from")
    for level in args.concurrency:
        try:
            point = measure_point(args.url, adapter, prompts, level, args.max_new_tokens, args.model, args.token)
        except httpx.HTTPError as error:
            raise SpecScopeError(f"cannot measure the {args.engine} server at {args.url}: {error}") from error
        except RuntimeError as error:  # the engine refused a request (its message says why)
            raise SpecScopeError(str(error)) from error
        points.append(point)
        al = f"{point['al']:.2f}" if point["al"] is not None else "-"
        print(
            f"{level:>11}{point['throughput_tps']:>9.1f}{point['interactivity_tps'] or 0:>12.1f}"
            f"{point['ttft_ms_p50'] or 0:>13.0f}{point['tpot_ms_p50'] or 0:>13.1f}{al:>7}  {point['al_from'] or '-'}",
            flush=True,
        )
    if args.json:
        print(json.dumps({"engine": args.engine, "url": args.url, "points": points}))
    return 0
