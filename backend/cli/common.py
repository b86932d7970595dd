"""What every CLI command shares: building the drafter options from flags and loading the target
(with its compiled graphs, progress on stderr). Parsing lives in main.py, benchmarks in bench.py."""

from __future__ import annotations

import argparse
import os
import sys


def drafter_options(args: argparse.Namespace):
    """The drafter options the registry's flags parsed (see main._add_drafter_args)."""
    import dataclasses

    from backend.drafters import DrafterOptions

    return DrafterOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(DrafterOptions)})


TARGET_HELP = "target model: default (SmolLM2-135M-Instruct), a HF id, a folder or a .gguf file"


def add_target_args(
    parser: argparse.ArgumentParser, target_default: str | None = "default", target_help: str = TARGET_HELP
) -> None:
    """The flags load_target reads: --target, then add_device_args's."""
    parser.add_argument("--target", default=target_default, help=target_help)
    add_device_args(parser)


def add_compile_arg(parser: argparse.ArgumentParser) -> None:
    """--compile: how engines on the target run its passes (load_target reads it)."""
    parser.add_argument(
        "--compile",
        choices=("auto", "on", "off"),
        default=os.environ.get("SPECSCOPE_COMPILE", "auto"),
        help="the target's passes: on = static KV cache + torch.compile graphs (Llama-family "
        "models; compiled once at start), off = Hugging Face's eager forward, auto (default, "
        "or $SPECSCOPE_COMPILE) = on where the model and machine allow it",
    )


def add_device_args(parser: argparse.ArgumentParser) -> None:
    """Where and how models load: --device, --dtype and --allow-remote-code (the worker's, for every target)."""
    parser.add_argument("--device", default="auto", help="auto (CUDA if present), cpu, cuda, cuda:N")
    parser.add_argument(
        "--dtype",
        default="auto",
        help="auto (bf16 on CUDA; on a CPU, bf16 where AMX-BF16 or AVX512-BF16 make it cheaper, else fp32), "
        "float32, bfloat16, float16",
    )
    parser.add_argument("--allow-remote-code", action="store_true", help="let models run their own code (trusted only)")


def load_target(args: argparse.Namespace, dtype: str | None = None):
    """The --target, loaded on --device in `dtype` (default: --dtype), warmed up."""
    quiet_libraries()
    from backend.core.models import load_model

    target = load_model(
        args.target,
        device=args.device,
        dtype=dtype or args.dtype,
        allow_remote_code=args.allow_remote_code,
        compile=getattr(args, "compile", "off"),
    )
    if target.dtype_reason:
        print(f"--dtype auto: {target.dtype_reason}", file=sys.stderr, flush=True)
    warm_up_target(target)
    return target


def warm_up_target(target) -> None:
    """Build the target's compiled graphs now, saying so on stderr (a minute or more on a small CPU)."""
    from backend.core.target_passes import compile_mode, prepare

    def say(message: str) -> None:
        print(f"{message} (once per process) ...", file=sys.stderr, flush=True)

    if compile_mode(target.model, target.compile) == "on":
        target.compile = prepare(target.model, target.compile, say)


def quiet_libraries() -> None:
    """Progress bars and advice from transformers are noise on a CLI's stderr."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
