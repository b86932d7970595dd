"""`export eagle3`: write a trained EAGLE-3 head as the checkpoint folder vLLM or SGLang loads, and print
the command that serves the target with it.

    python -m backend export eagle3 --out exported/eagle3-vllm --format vllm
    python -m backend export eagle3 --drafter-path data/drafters/eagle3-smollm2 --out DIR --format sglang

The head is read for its target (default: the embedded default), which checks it was trained for that
model; the layout and what cannot be exported are backend/drafters/eagle3_export.py's. This module only
parses and prints.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

DEFAULT_DRAFT_LEN = 4


def add_export_parser(commands) -> None:
    from backend.drafters.eagle3_export import ENGINES

    export = commands.add_parser("export", help="write a trained head for a serving engine").add_subparsers(
        title="heads"
    )
    eagle3 = export.add_parser(
        "eagle3",
        help="an EAGLE-3 head as vLLM's / SGLang's EAGLE-3 checkpoint (config.json + model.safetensors)",
        description=__doc__.split("\n\n")[0],
    )
    eagle3.add_argument("--drafter-path", help="the head's weights folder (default: the one trained for --target)")
    eagle3.add_argument("--out", type=Path, required=True, help="the folder to write")
    eagle3.add_argument("--format", required=True, choices=ENGINES, help="the engine that will load it")
    eagle3.add_argument("--target", default="default", help="the head's target: default, a HF id, a folder or a .gguf")
    eagle3.add_argument(
        "--draft-len", type=int, default=DEFAULT_DRAFT_LEN, help="D in the printed serve command (default 4)"
    )
    eagle3.set_defaults(handler=export_eagle3)


def export_eagle3(args: argparse.Namespace) -> int:
    from backend.cli.common import quiet_libraries
    from backend.core.errors import SpecScopeError
    from backend.core.models import load_model
    from backend.drafters import eagle3
    from backend.drafters.eagle3_export import check_new_folder, export
    from backend.drafters.shipped import shown_path, weights_folder

    if args.draft_len < 1:
        raise SpecScopeError(f"--draft-len must be at least 1, got {args.draft_len}")
    check_new_folder(args.out)  # before anything is loaded
    quiet_libraries()
    target = load_model(args.target, device="cpu", dtype="float32", compile="off")
    folder = weights_folder(eagle3.KIND, target, args.drafter_path)
    out = export(eagle3.load(folder, target).head, args.out, args.format)
    print(f"wrote {args.format}'s EAGLE-3 checkpoint of {shown_path(Path(folder))} to {out}", file=sys.stderr)
    print(serve_command(args.format, target.source, out, args.draft_len))
    return 0


def serve_command(engine: str, target_source: str, draft_folder: Path, draft_len: int) -> str:
    """The shell command that serves `target_source` drafting `draft_len` tokens with the exported head."""
    from backend.drafters.eagle3 import engine_settings

    target = shlex.quote(str(target_source))
    if engine == "vllm":
        spec = engine_settings(draft_len, str(draft_folder))["vllm"]
        return f"vllm serve {target} --speculative-config {shlex.quote(json.dumps(spec))}"
    flags = engine_settings(draft_len, shlex.quote(str(draft_folder)))["sglang"]
    return f"python -m sglang.launch_server --model-path {target} {flags}"
