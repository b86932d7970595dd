"""`auto`'s rule as it is now ("new") against its rule at an earlier commit ("old"), interleaved with plain
decoding in one process: the same target, drafters and prompts, with `AdaptiveDraftLength.observe` swapped
between the two forms before each run. `bench speed` measures one policy, the one this checkout has; this compares two.

    python scripts/bench_auto_rules.py --old-rule-from f4e20b2 [--per-category 2] [--seed 0]
        [--max-new-tokens 64]

Each prompt: plain decoding, then in shuffled order eagle3 `auto` with a confidence stop of 0.35 and dspark
`auto`, each under both rules; every output must equal plain decoding's. Prints each prompt's ratios (plain
decode time / config decode time, prefill left out), then their geometric means and tokens per step (every
step, plain ones included). Knows nothing about what differs between the two rules.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.cli.common import load_target  # noqa: E402
from backend.core import policy as policy_now  # noqa: E402
from backend.core.engine import GenerationSettings  # noqa: E402
from backend.drafters import DrafterOptions, build_drafter  # noqa: E402
from backend.lab.prompts import DEFAULT_SUITE, load_suite  # noqa: E402
from backend.lab.runner import Runner  # noqa: E402

CONFIGS = (("eagle3", 0.35), ("dspark", 0.0))  # drafter, confidence stop


def observe_at(revision: str):
    """AdaptiveDraftLength.observe as backend/core/policy.py had it at `revision`."""
    source = subprocess.run(
        ["git", "show", f"{revision}:backend/core/policy.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "policy_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("policy_then", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["policy_then"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.AdaptiveDraftLength.observe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-rule-from", required=True, help="the git revision whose rule is compared")
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the order of the runs on each prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    rules = {"old": observe_at(args.old_rule_from), "new": policy_now.AdaptiveDraftLength.observe}
    target = load_target(
        argparse.Namespace(target="default", device="cpu", dtype="auto", allow_remote_code=False, compile="auto")
    )
    runner = Runner(target)
    questions = load_suite(DEFAULT_SUITE, per_category=args.per_category)
    drafters = {name: build_drafter(name, target, DrafterOptions()) for name, _ in CONFIGS}
    configs = {f"{name}@auto/conf={stop}/{rule}": (name, stop, rule) for name, stop in CONFIGS for rule in rules}
    plain_settings = GenerationSettings(max_new_tokens=args.max_new_tokens, draft_len=0)
    runner.run(["Warm up."], None, GenerationSettings(max_new_tokens=8, draft_len=0))
    ratios: dict[str, list[float]] = {label: [] for label in configs}
    tokens_per_step: dict[str, list[float]] = {label: [] for label in configs}
    shuffle = random.Random(args.seed)
    for question in questions:
        plain = runner.run(question.turns, None, plain_settings)
        labels = list(configs)
        shuffle.shuffle(labels)
        for label in labels:
            name, stop, rule = configs[label]
            policy_now.AdaptiveDraftLength.observe = rules[rule]
            settings = GenerationSettings(max_new_tokens=args.max_new_tokens, draft_len="auto", min_confidence=stop)
            result = runner.run(question.turns, drafters[name], settings)
            if result.output_ids != plain.output_ids:
                raise SystemExit(f"{label} differs from plain decoding on question {question.question_id}")
            ratios[label].append(plain.decode_s / result.decode_s)
            tokens_per_step[label].append(len(result.output_ids) / max(1, len(result.steps)))
        print(question.category, {label: round(values[-1], 3) for label, values in ratios.items()}, flush=True)
    policy_now.AdaptiveDraftLength.observe = rules["new"]
    prompts, new_tokens = len(questions), args.max_new_tokens
    print(f"decode-only speed against plain, geometric mean over {prompts} prompts, {new_tokens} new tokens")
    for label in configs:
        mean = math.exp(sum(map(math.log, ratios[label])) / len(ratios[label]))
        steps = sum(tokens_per_step[label]) / len(tokens_per_step[label])
        print(f"{label:32s} {mean:.3f}x  tokens/step {steps:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
