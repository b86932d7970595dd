"""`specscope ...` (or `python -m backend ...`): the dashboard, the worker, generating text with a drafter,
and the benchmarks.

    generate --prompt TEXT | --prompt-file FILE | --suite FILE [--limit N]   one prompt, or a suite
    bench speed --suite FILE --drafters a,b --draft-lens 2,4,8              speed and losslessness
    bench sweep --drafters a,b --draft-lens 0,4 --batch-sizes 1,4 [--temperatures 0,0.7]
                [--option ngram_max=2,3,4]                                 the Pareto grid, stored
    bench sweep --engine vllm|sglang|tensorrt_llm|llamacpp (--url URL | --launch CMD --draft-lens 2,4)
                --concurrency 1,4,16                                       a serving engine's sweep, stored
    bench reference                                                        rebuild data/reference/
    bench train-step --kind eagle3                                         a training step, fp32 vs bf16
    export eagle3 --out DIR --format vllm|sglang                           a trained head for vLLM / SGLang
    training-data [--out FILE.jsonl]                                       the drafters' training instructions

Every user error (bad flag value, missing model, empty prompt, ...) ends with one `error:` line on
stderr and exit status 2, never a traceback. This module only parses and prints.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from backend.cli.arg_types import (
    confidence,
    confidences,
    count,
    draft_len,
    draft_lens,
    dtypes,
    names,
    option_values,
    seed,
    sizes,
    temperatures,
    tree_budget,
    tree_budgets,
    tree_topk,
)
from backend.cli.bench_start import add_bench_start_parser
from backend.cli.bench_train_step import add_bench_train_step_parser
from backend.cli.codesign import add_codesign_parser
from backend.cli.common import add_compile_arg, add_device_args, add_target_args, quiet_libraries
from backend.cli.engine import add_engine_args
from backend.cli.export import add_export_parser
from backend.cli.generate import generate_command
from backend.cli.train import add_train_parser
from backend.cli.training_data import add_training_data_parser
from backend.core.errors import SpecScopeError
from backend.lab.prompts import DEFAULT_SUITE
from backend.lab.reference import PRESET as REFERENCE_PRESET
from backend.lab.reference import REFERENCE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except SpecScopeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    prog = "specscope" if Path(sys.argv[0]).name == "specscope" else "python -m backend"
    parser = argparse.ArgumentParser(prog=prog, description="SpecScope: speculative decoding lab")
    commands = parser.add_subparsers(title="commands")

    run = commands.add_parser(
        "run",
        help="the dashboard (Streamlit); it starts its own worker",
        description="Open the dashboard in a browser at http://localhost:PORT. It starts a "
        "worker unless SPECSCOPE_WORKER_URL points at one.",
    )
    run.add_argument("--port", type=int, default=8501)
    run.set_defaults(handler=_run_dashboard)

    generate = commands.add_parser(
        "generate",
        help="decode a prompt (or a suite) with a drafter",
        description="Decode with speculative decoding and show what was accepted.",
    )
    source = generate.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text (one user turn)")
    source.add_argument("--prompt-file", type=Path, help="a file holding the prompt text")
    source.add_argument("--suite", type=Path, help="a question.jsonl suite: run every prompt in it")
    generate.add_argument("--limit", type=count, help="with --suite: only the first N prompts")
    generate.add_argument("--categories", type=names, help="with --suite: only these categories (comma-separated)")
    _add_model_args(generate)
    _add_drafter_args(generate)
    generate.add_argument(
        "--draft-len",
        default="auto",
        type=draft_len,
        help="D, tokens drafted per step (0 = plain decoding), or auto (default)",
    )
    generate.add_argument(
        "--tree-budget",
        type=tree_budget,
        default=0,
        help="draft a token tree of up to N nodes, D deep (0 = a chain, default)",
    )
    generate.add_argument("--tree-topk", type=tree_topk, default=4, help="with --tree-budget: children per tree node")
    generate.add_argument(
        "--min-confidence",
        type=confidence,
        default=0.0,
        help="stop a chain before the first draft whose running product of the drafter's probabilities is "
        "below this (0 = never, default)",
    )
    _add_decoding_args(generate)
    generate.add_argument("--json", action="store_true", help="print JSON (one object per prompt per line)")
    generate.set_defaults(handler=generate_command)

    bench = commands.add_parser("bench", help="benchmarks").add_subparsers(title="benchmarks")
    speed = bench.add_parser(
        "speed",
        help="end-to-end speed vs plain decoding and Hugging Face",
        description="Per prompt: plain decoding, HF generate, HF prompt-lookup assisted "
        "generation and every drafter at every D, interleaved in one process.",
    )
    speed.add_argument("--suite", type=Path, required=True, help="a question.jsonl suite")
    speed.add_argument("--limit", type=count, help="only the first N prompts (after --categories)")
    speed.add_argument("--categories", type=names, help="only these categories (comma-separated)")
    speed.add_argument("--per-category", type=count, help="only the first N prompts of each category")
    speed.add_argument("--drafters", type=names, default=["ngram", "suffix"], help="comma-separated drafters")
    speed.add_argument("--draft-lens", type=draft_lens, default=[2, 4, 8], help="comma-separated D values (or auto)")
    _add_option_values_arg(speed)
    _add_draft_shape_args(speed)
    speed.add_argument("--max-new-tokens", type=int, default=128)
    speed.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    _add_model_args(speed)
    _add_drafter_args(speed, with_name=False)
    speed.set_defaults(handler=lambda args: _bench("speed", args))

    forward = bench.add_parser(
        "forward",
        help="cost of one target pass of T new tokens, eager beside compiled",
        description="Times a pass of T = 1..32 new tokens on a cache of --context tokens at "
        "each batch size, eager (Hugging Face's forward) and compiled (static "
        "cache + torch.compile; with --compile off, eager only), interleaved; "
        "medians and the ratio to T = 1, the memory roofline and plain tok/s.",
    )
    forward.add_argument("--batch-sizes", type=sizes, default=[1, 16])
    forward.add_argument("--widths", type=sizes, default=[1, 2, 4, 8, 16, 32], help="new tokens per pass")
    forward.add_argument("--context", type=int, default=200, help="tokens already cached")
    forward.add_argument("--repeats", type=int, default=7)
    forward.add_argument("--profile", action="store_true", help="top operators of a 1- and a 9-token pass per mode")
    forward.add_argument(
        "--prefill",
        action="store_true",
        help="also time the first token of a batch of suite prompts at each batch size (compiled path), "
        "prompts prefilled one by one beside grouped by length",
    )
    forward.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")
    _add_model_args(forward)
    forward.set_defaults(handler=lambda args: _bench("forward", args))

    sweep = bench.add_parser(
        "sweep",
        help="drafters x D x batch sizes, stored in DuckDB, with the Pareto frontier (or a serving engine's)",
        description="Runs the grid with the batched engine and stores every point (through "
        "the worker when one answers, else directly into the DuckDB file). With --engine, measures "
        "a vLLM, SGLang, TensorRT-LLM or llama.cpp server instead, one point per D and concurrency.",
    )
    # D: default 0,2,4,8 for SpecScope's engine (bench.SWEEP_DRAFT_LENS); an engine sweep's must be given
    grid = {"drafters": ["ngram", "suffix"], "draft_lens": None, "batch_sizes": [1, 2, 4, 8, 16]}
    _add_sweep_args(sweep, grid)
    sweep.add_argument(
        "--db", help="the DuckDB store: its worker (which publishes its URL beside it) is used when running"
    )
    sweep.add_argument("--local", action="store_true", help="do not use a running worker; write the file directly")
    add_engine_args(sweep)
    sweep.set_defaults(handler=lambda args: _bench("sweep", args))

    reference = bench.add_parser(
        "reference",
        help="rebuild the reference dataset (data/reference/*.parquet) the dashboard shows on first start",
        description="Runs the reference sweep of the default target in this process, into a temporary "
        "store, and writes it as Parquet, labelled with this machine's CPU, the date and the software "
        "versions. The defaults are the shipped reference's preset; the flags are bench sweep's.",
    )
    _add_sweep_args(reference, REFERENCE_PRESET)
    reference.add_argument("--out", type=Path, default=REFERENCE_DIR, help=f"output folder (default {REFERENCE_DIR})")
    reference.set_defaults(handler=lambda args: _bench("reference", args))

    stream = bench.add_parser(
        "stream",
        help="tokens/s through the worker's stream vs in process; memory",
        description="Decodes the same prompts in this process and through a worker "
        "process, alternating; reports the ratio, the time to the first step "
        "record and the worker's resident memory.",
    )
    stream.add_argument("--suite", type=Path, required=True)
    stream.add_argument("--per-category", type=count, default=1)
    stream.add_argument("--categories", type=names)
    stream.add_argument("--drafter", default="suffix")
    stream.add_argument("--draft-len", type=draft_len, default="auto")
    stream.add_argument("--max-new-tokens", type=int, default=128)
    stream.add_argument("--repeats", type=int, default=2)
    add_target_args(stream)
    add_compile_arg(stream)
    stream.add_argument("--json", action="store_true")
    stream.set_defaults(handler=lambda args: _bench("stream", args))
    add_bench_start_parser(bench)
    add_bench_train_step_parser(bench)

    add_codesign_parser(commands)
    add_train_parser(commands)
    add_training_data_parser(commands)

    worker = commands.add_parser(
        "worker",
        help="serve models over HTTP for the dashboard (FastAPI + uvicorn)",
        description="The worker owns the models and the device and is the only writer "
        "of the DuckDB run store. OpenAPI docs at /docs.",
    )
    worker.add_argument("--host", default="127.0.0.1", help="bind address (non-loopback needs SPECSCOPE_TOKEN)")
    worker.add_argument("--port", type=int, default=8765)
    worker.add_argument("--db", help="DuckDB file (default $SPECSCOPE_DB or data/specscope.duckdb)")
    worker.add_argument("--default-target", default="default", help="the target used when a request names none")
    worker.add_argument("--preload", type=names, default=None, help="models to load at start (default: the target)")
    worker.add_argument("--targets", type=names, default=[], help="more targets to offer in the dashboard")
    add_device_args(worker)
    add_compile_arg(worker)
    worker.add_argument("--model-budget-gb", type=float, default=4.0, help="evict least recently used models above")
    worker.add_argument("--log-file", help="the worker's log (default: worker.log beside the DuckDB file)")
    worker.add_argument(
        "--reference",
        default=os.environ.get("SPECSCOPE_REFERENCE", str(REFERENCE_DIR)),
        help="folder of the reference sweep (Parquet) imported at start; off: none "
        "(default $SPECSCOPE_REFERENCE, else data/reference)",
    )
    worker.set_defaults(handler=_worker)

    add_export_parser(commands)
    return parser


# ---------------------------------------------------------------------------------------------------
# arguments


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    add_target_args(parser)
    add_compile_arg(parser)


def _add_sweep_args(parser: argparse.ArgumentParser, defaults: dict) -> None:
    """The grid and prompt flags `bench sweep` and `bench reference` share, with their own defaults."""
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="a question.jsonl suite (default: shipped)")
    parser.add_argument("--drafters", type=names, default=defaults["drafters"])
    parser.add_argument(
        "--draft-lens",
        type=draft_lens,
        default=defaults["draft_lens"],
        help="comma-separated D values; also auto, and schedule:1=8/4=4/16=2 (D by batch size)",
    )
    parser.add_argument(
        "--batch-sizes", "--concurrency", type=sizes, default=defaults["batch_sizes"], help="engines: concurrency"
    )
    parser.add_argument(
        "--temperatures", type=temperatures, default=[0.0], help="comma-separated; 0 = greedy (default 0)"
    )
    _add_option_values_arg(parser)
    _add_draft_shape_args(parser)
    parser.add_argument("--max-new-tokens", type=int, default=defaults.get("max_new_tokens", 64))
    parser.add_argument("--categories", type=names)
    parser.add_argument("--limit", type=count)
    parser.add_argument("--per-category", type=count, default=defaults.get("per_category"))
    add_target_args(
        parser, None, "target model (default: the worker's default target; in process, the embedded default)"
    )
    add_compile_arg(parser)
    parser.add_argument(
        "--dtypes",
        type=dtypes,
        help="precision as a sweep dimension, e.g. float32,bfloat16: the whole grid in each (replaces --dtype)",
    )
    parser.add_argument("--json", action="store_true", help="the last line of stdout is one JSON object")


def _add_option_values_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--option",
        dest="options",
        type=option_values,
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a drafter option to sweep, e.g. ngram_max=2,3,4 or suffix_max_depth=8,24 or "
        "drafter_path=FOLDER1,FOLDER2 (repeatable; each drafter sweeps the options it has)",
    )


def _add_draft_shape_args(parser: argparse.ArgumentParser) -> None:
    """What shapes each step's drafts besides D: token-tree budgets and a chain's confidence stops."""
    parser.add_argument(
        "--tree-budgets",
        type=tree_budgets,
        default=[0],
        help="comma-separated tree budgets, nodes verified per step (0 = a chain, default) for drafters "
        "that build trees",
    )
    parser.add_argument("--tree-topk", type=tree_topk, default=4, help="with --tree-budgets: children per tree node")
    parser.add_argument(
        "--min-confidences",
        type=confidences,
        default=[0.0],
        help="comma-separated confidence stops for chains (0 = none, default): each drafter at each",
    )


def _add_drafter_args(parser: argparse.ArgumentParser, with_name: bool = True) -> None:
    """--drafter and every registered drafter's options, generated from the registry."""
    from backend.drafters import DRAFTER_NAMES, REGISTRY, all_options

    if with_name:
        parser.add_argument("--drafter", default="suffix", help=f"one of {', '.join(DRAFTER_NAMES)} (default suffix)")
    users = {
        info.name: [name for name, spec in REGISTRY.items() if info in spec.option_infos()] for info in all_options()
    }
    for info in all_options():
        default = "" if info.default is None else f" (default {info.default})"
        parser.add_argument(
            info.flag,
            dest=info.name,
            type=_checked(info),
            default=info.default,
            metavar=info.kind.__name__.upper(),
            help=f"{'/'.join(users[info.name])}: {info.help}{default}",
        )


def _checked(info):
    """argparse's type for a registry option: a clear one-line error for a bad or out-of-bounds value."""

    def parse(text: str):
        try:
            return info.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from error

    return parse


def _add_decoding_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--no-chat-template", action="store_true", help="feed the prompt raw, without a chat template")


def _bench(command: str, args: argparse.Namespace) -> int:
    from backend.cli import bench as cli_bench

    handlers = {
        "speed": cli_bench.bench_speed,
        "forward": cli_bench.bench_forward,
        "sweep": cli_bench.bench_sweep,
        "reference": cli_bench.bench_reference,
        "stream": cli_bench.bench_stream,
    }
    return handlers[command](args)


# ---------------------------------------------------------------------------------------------------
# worker


def _run_dashboard(args: argparse.Namespace) -> int:
    app = Path(__file__).resolve().parents[2] / "app.py"  # beside backend/, in a checkout or installed
    print(f"SpecScope: open http://localhost:{args.port}", file=sys.stderr, flush=True)
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.headless",
        "true",
        "--server.port",
        str(args.port),
        "--browser.gatherUsageStats",
        "false",
    ]
    return subprocess.call(command, cwd=app.parent)


def _worker(args: argparse.Namespace) -> int:
    quiet_libraries()
    from backend.serving.worker import WorkerSettings, serve

    settings = WorkerSettings(
        db_path=args.db,
        default_target=args.default_target,
        preload=args.preload if args.preload is not None else [args.default_target],
        extra_targets=args.targets,
        device=args.device,
        dtype=args.dtype,
        allow_remote_code=args.allow_remote_code,
        model_budget_gb=args.model_budget_gb,
        compile=args.compile,
        log_file=args.log_file,
        reference=None if args.reference == "off" else args.reference,
    )
    print(f"SpecScope worker on http://{args.host}:{args.port} (docs at /docs)", file=sys.stderr, flush=True)
    serve(args.host, args.port, settings)
    return 0
