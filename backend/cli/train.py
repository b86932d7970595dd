"""`train`: the flags of the drafter-training command. What it does is backend/training/run.py's; this module
only parses.
"""

from __future__ import annotations

import argparse

from backend.cli.arg_types import count, json_object
from backend.cli.common import add_compile_arg, add_target_args


def add_train_parser(commands) -> None:
    trainer = commands.add_parser(
        "train",
        help="train a drafter (eagle3, mtp, dflash, dspark, draft-model) for a target",
        description="Self-distillation: the target answers instructions built from "
        "Python's own documentation and source and chat requests of every suite category "
        "(see `training-data`); its hidden states are "
        "cached once and reused by every drafter. Resumes from the output "
        "folder's checkpoint.",
    )
    trainer.add_argument("--kind", required=True)
    trainer.add_argument("--out", required=True, help="output folder (weights, checkpoint, model card)")
    trainer.add_argument("--tokens", type=int, default=200_000, help="training window tokens to see")
    trainer.add_argument(
        "--minutes",
        type=float,
        help="stop training after this long (or at --tokens, if sooner; "
        "validation time is not counted), counted over every run of --out: a resumed run goes on "
        "from the checkpoint's training time; the learning-rate schedule follows the time",
    )
    trainer.add_argument("--data-tokens", type=int, default=60_000, help="sequence tokens to distil and cache")
    trainer.add_argument(
        "--distil-minutes",
        type=float,
        help="stop distilling each split after this long, the teacher's sources together (the cache resumes; "
        "0: train on what is cached)",
    )
    trainer.add_argument(
        "--distil-seed",
        type=int,
        default=0,
        help="which instructions are distilled first; another seed starts on instructions an earlier cache of the "
        "corpus (e.g. the one shipped weights were trained on) did not begin with",
    )
    trainer.add_argument("--distil-batch", type=int, default=8, help="answers generated together while distilling")
    trainer.add_argument(
        "--teacher",
        choices=("generate", "prefill", "mix"),
        default="mix",
        help="mix (default, every shipped drafter's last round): both of these, --data-tokens each; "
        "generate: the target answers the instructions; prefill: it reads existing answers once (cheaper)",
    )
    trainer.add_argument(
        "--self-instruct",
        type=count,
        metavar="N",
        help="also distil N requests the target writes itself, continuing lists of the corpus's own (self-instruct; "
        "written once and cached, the same list for every later run); needs generated answers (generate or mix)",
    )
    trainer.add_argument(
        "--distil-only",
        action="store_true",
        help="fill the shared distillation cache and stop (several kinds can then train at once)",
    )
    trainer.add_argument(
        "--validation-prompts",
        type=int,
        default=8,
        help="held-out instructions the drafter is run on at each validation",
    )
    trainer.add_argument("--answer-tokens", type=int, default=160, help="max new tokens per target answer")
    trainer.add_argument("--window", type=int, default=256)
    trainer.add_argument("--rows", type=int, default=8)
    trainer.add_argument("--lr", type=float, default=1e-3)
    trainer.add_argument("--validate-every", type=int, default=100)
    trainer.add_argument(
        "--feature-noise",
        type=float,
        default=0.0,
        help="eagle3 and mtp: uniform noise on the target states the head reads while training, up to this "
        "share of each state's RMS (0.1: +-10%%; EAGLE's regulariser); 0: none",
    )
    trainer.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="the head's matmuls: bf16 autocast (fp32 weights and optimizer; the teacher's logits in full precision) "
        "or fp32; auto: bf16 where the device multiplies bf16 in hardware (CUDA, AVX512-BF16 or AMX CPUs)",
    )
    trainer.add_argument(
        "--eval-per-category",
        type=int,
        default=0,
        help="prompts per category of the suite to measure AL by D on for the model card",
    )
    trainer.add_argument(
        "--ship",
        metavar="DIR",
        help="then measure the weights in DIR the same way and replace them only if the new ones have a higher "
        "mean suite AL (2 prompts per category unless --eval-per-category); DIR's card records the round",
    )
    trainer.add_argument(
        "--settings",
        type=json_object,
        default={},
        help="JSON object of the mechanism's settings (layers, vocabulary, ...)",
    )
    trainer.add_argument(
        "--init-from",
        metavar="DIR",
        help="start from the weights (and draft vocabulary) of a folder this command wrote, such as a shipped "
        "drafter's, instead of a fresh head: training goes on where they stopped, with a new optimizer and "
        "learning-rate schedule; the card counts their steps, tokens and time first (a checkpoint in --out wins)",
    )
    add_target_args(trainer)
    add_compile_arg(trainer)
    trainer.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from backend.cli.common import load_target
    from backend.training.run import train_command

    return train_command(args, load_target)
