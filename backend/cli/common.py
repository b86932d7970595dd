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


def load_target(args: argparse.Namespace):
    quiet_libraries()
    from backend.core.models import load_model

    target = load_model(
        args.target,
        device=args.device,
        dtype=args.dtype,
        allow_remote_code=args.allow_remote_code,
        compile=getattr(args, "compile", "off"),
    )
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
