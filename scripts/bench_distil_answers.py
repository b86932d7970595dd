"""How fast the self-distillation teacher generates answers on this machine: the target's greedy answers to
chat instructions of the training corpus, through SpecScope's batched engine on the compiled passes (what
`train` uses on a CPU) and through Hugging Face's eager `generate` (what it uses elsewhere), interleaved
round by round at each batch size. Prints answer tokens per second for each and their ratio; each round
checks that the two gave the same answers, and counts the rows where they differ (near-ties can flip).

    python scripts/bench_distil_answers.py [--batch-sizes 1,8,16] [--answer-tokens 96] [--rounds 2]

The compiled graphs of each batch size are built (or read from the inductor cache) before the timed rounds.
Knows nothing about training; the figures are this machine's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.cli.common import load_target  # noqa: E402
from backend.training.corpus import build_instructions  # noqa: E402
from backend.training.dataset import MAX_PROMPT_TOKENS, engine_answers, generated_answers  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="1,8,16")
    parser.add_argument("--answer-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    target = load_target(
        argparse.Namespace(target="default", device="cpu", dtype="auto", allow_remote_code=False, compile="on")
    )
    sizes = [int(size) for size in args.batch_sizes.split(",")]
    chat = [i for i in build_instructions() if i.source.startswith("chat")]
    prompts = [i.prompt_ids(target.tokenizer)[-MAX_PROMPT_TOKENS:] for i in chat[: max(sizes)]]
    for size in sizes:  # builds (or reads) the batched graphs of every size before timing
        engine_answers(target, prompts[:size], 4)
    ways = {"engine (compiled)": engine_answers, "HF generate (eager)": generated_answers}
    print(f"{target.spec}, {args.answer_tokens} answer tokens at most, {args.rounds} interleaved rounds")
    for size in sizes:
        tokens = {name: 0 for name in ways}
        seconds = {name: 0.0 for name in ways}
        differ = 0
        for _ in range(args.rounds):
            answers = {}
            for name, answer in ways.items():
                started = time.perf_counter()
                answers[name] = answer(target, prompts[:size], args.answer_tokens)
                seconds[name] += time.perf_counter() - started
                tokens[name] += sum(len(a) for a in answers[name])
            first, second = answers.values()
            differ += sum(a != b for a, b in zip(first, second, strict=True))
        rates = {name: tokens[name] / seconds[name] for name in ways}
        engine, generate = rates.values()
        shown = ", ".join(f"{name} {rate:.0f} tok/s" for name, rate in rates.items())
        print(f"batch {size:>2}: {shown}; ratio {engine / generate:.2f}x; rows that differ {differ}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
