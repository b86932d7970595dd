"""`training-data`: build the drafters' training instructions the way `train` does and show what is in
them, so the corpus can be reproduced and inspected without a model.

    python -m backend training-data                       counts per category and split, and the sha256
    python -m backend training-data --out corpus.jsonl    also write one JSON object per instruction
    python -m backend training-data --self-instruct 200   with 200 requests the target writes (`train --self-instruct`)

The sha256 is that of the JSONL text (the file --out writes), so `sha256sum corpus.jsonl` matches it. What
goes into the corpus is backend/training/corpus.py's; this module only prints and writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

from backend.cli.arg_types import count
from backend.cli.common import add_compile_arg, add_target_args

SPLITS = ("train", "validation")


def add_training_data_parser(commands) -> None:
    data = commands.add_parser(
        "training-data",
        help="build the drafters' training instructions; print counts and sha256, optionally write JSONL",
        description=__doc__.split("\n\n")[0],
    )
    data.add_argument("--out", type=Path, help="write the instructions here, one JSON object per line")
    data.add_argument("--seed", type=int, default=0, help="the shuffle seed (train uses 0)")
    data.add_argument(
        "--self-instruct",
        type=count,
        metavar="N",
        help="add N requests the target writes itself (loads it; written once and cached, the list `train "
        "--self-instruct N` distils)",
    )
    add_target_args(data)
    add_compile_arg(data)
    data.set_defaults(handler=training_data_command)


def training_data_command(args: argparse.Namespace) -> int:
    from backend.core.errors import SpecScopeError
    from backend.training.corpus import build_instructions

    if args.out is not None and not args.out.parent.is_dir():
        raise SpecScopeError(f"--out: the folder {args.out.parent} does not exist")
    instructions = build_instructions(args.seed)
    if args.self_instruct:
        instructions += _self_written(args, instructions)
    records = [
        {
            "id": i.instruction_id,
            "category": i.category,
            "source": i.source,
            "split": i.split,
            "history": [list(pair) for pair in i.history],
            "text": i.text,
        }
        for i in instructions
    ]
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    counts = Counter((record["category"], record["split"]) for record in records)
    print(f"{'category':<16}" + "".join(f"{split:>12}" for split in SPLITS) + f"{'total':>12}")
    for category in sorted({category for category, _ in counts}) + ["all"]:
        row = [sum(n for (c, s), n in counts.items() if s == split and category in (c, "all")) for split in SPLITS]
        print(f"{category:<16}" + "".join(f"{n:>12}" for n in row) + f"{sum(row):>12}")
    print(f"sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {len(records)} instructions to {args.out}", file=sys.stderr)
    return 0


def _self_written(args: argparse.Namespace, instructions: list) -> list:
    """The target's own requests, as `train --self-instruct` distils them (its batch size; read from the cache
    once written)."""
    from backend.cli.common import load_target
    from backend.training.dataset import default_cache_root
    from backend.training.self_instruct import written_requests

    target = load_target(args)
    written = written_requests(target, instructions, args.self_instruct, default_cache_root(), batch_size=8)
    by_category = Counter(i.category for i in written)
    shares = ", ".join(f"{category} {n}" for category, n in sorted(by_category.items()))
    print(f"{len(written)} of them written by the target (source self:<category>; {shares})", file=sys.stderr)
    return written
