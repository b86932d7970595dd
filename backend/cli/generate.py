"""The `generate` command: decode one prompt or a suite with a drafter and print what was accepted (ANSI
colours on a terminal, JSON with --json). Parsing lives in main.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from backend.cli.common import drafter_options, load_target
from backend.core.errors import SpecScopeError


def generate_command(args: argparse.Namespace) -> int:
    from backend.core.engine import GenerationSettings
    from backend.core.policy import make_policy
    from backend.core.verify import SamplingParams
    from backend.drafters import build_drafter, check_tree_budget
    from backend.lab.prompts import load_suite
    from backend.lab.runner import Runner

    make_policy(args.draft_len, free_drafter=True)  # reject a bad D or tree before loading anything
    check_tree_budget(args.drafter, args.tree_budget)
    settings = GenerationSettings(
        max_new_tokens=args.max_new_tokens,
        draft_len=args.draft_len,
        sampling=SamplingParams(args.temperature, args.top_p, args.top_k),
        seed=args.seed,
        stop_strings=tuple(args.stop),
        tree_budget=args.tree_budget,
        tree_topk=args.tree_topk,
        min_confidence=args.min_confidence,
    )
    if args.suite is not None:
        questions = load_suite(args.suite, args.categories, args.limit)
    else:
        text = args.prompt if args.prompt is not None else _read_prompt_file(args.prompt_file)
        if not text.strip():
            raise SpecScopeError("the prompt is empty: give some text with --prompt or --prompt-file")
        questions = None
    target = load_target(args)
    drafter = build_drafter(args.drafter, target, drafter_options(args))
    runner = Runner(target, use_chat_template=not args.no_chat_template)
    header = {"target": args.target, "drafter": args.drafter, "draft_len": args.draft_len}
    if args.tree_budget:
        header["tree_budget"] = args.tree_budget
    if args.min_confidence:
        header["min_confidence"] = args.min_confidence
    if questions is None:
        result = runner.run([text], drafter, settings)
        _print_result(runner, result, header, args.json)
        return 0
    for question in questions:
        result = runner.run(question.turns, drafter, settings)
        record = {"question_id": question.question_id, "category": question.category, **header}
        _print_result(runner, result, record, args.json)
    return 0


def _read_prompt_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecScopeError(f"cannot read prompt file {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise SpecScopeError(f"prompt file {path} is not UTF-8 text") from error


def _print_result(runner, result, header: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**header, **result.to_dict()}), flush=True)
        return
    if "question_id" in header:
        print(f"=== {header['question_id']} ({header['category']})")
    marked = sys.stdout.isatty()
    for turn in result.turns:
        print(render_marked(runner.decode, turn.steps, ansi=marked))
    print(_summary_line(result.summary(), result.turns[-1].finish_reason), flush=True)


def render_marked(decode, steps, ansi: bool) -> str:
    """The output with accepted draft tokens marked: green on a terminal, else inside [[ ]]."""
    opened, closed = ("\033[32m", "\033[0m") if ansi else ("[[", "]]")
    ids: list[int] = []
    pieces: list[str] = []
    for step in steps:
        accepted = min(step.accepted, len(step.emitted))
        for chunk, is_draft in ((step.emitted[:accepted], True), (step.emitted[accepted:], False)):
            if not chunk:
                continue
            before = decode(ids)
            ids += chunk
            text = decode(ids)[len(before) :]
            pieces.append(f"{opened}{text}{closed}" if is_draft and text else text)
    return "".join(pieces)


def _summary_line(summary: dict, finish_reason: str | None) -> str:
    rho = f"{summary['rho']:.3f}" if summary["rho"] is not None else "-"
    return (
        f"AL {summary['al']:.2f} | acceptance {100 * summary['acceptance_rate']:.1f}% | "
        f"{summary['new_tokens']} tokens in {summary['decode_s']:.2f} s ({summary['tokens_per_s']:.1f} tok/s) | "
        f"{summary['target_forwards']} target forwards | rho {rho} | finish {finish_reason}"
    )
