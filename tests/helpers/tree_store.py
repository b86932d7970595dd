"""A store holding chain and token-tree runs of the lookup drafters, for the tests of AL against the tree
budget: each run's steps are made up (a tree of two branches, one of them kept up to a random depth), so
what the store, the worker and the Acceptance page count can be checked against AcceptanceCounter."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

from backend.core.metrics import AcceptanceCounter
from backend.lab.labels import variant_label
from backend.lab.store import RunStore

DRAFT_LEN = 3
BUDGETS = (0, 4, 6)  # two branches of depth 2 and 3
RUNS_PER_CONFIG = 3


def made_up_steps(budget: int, rng: random.Random, count: int = 5) -> list[dict]:
    """Chain steps of D drafts (budget 0), or tree steps of `budget` nodes in two branches from the root."""
    steps = []
    for index in range(count):
        if budget == 0:
            accepted = rng.randint(0, DRAFT_LEN)
            steps.append({"index": index, "turn": 0, "drafted": [5] * DRAFT_LEN, "accepted": accepted, "emitted": [5]})
            continue
        depth = min(DRAFT_LEN, budget // 2)
        parents = [-1, *range(depth - 1)] + [-1, *range(depth, budget - 1)]  # [budget]: two chains
        kept = rng.randint(0, depth)
        step = {"index": index, "turn": 0, "drafted": [6] * budget, "accepted": kept, "emitted": [6]}
        steps.append(step | {"parents": parents, "accepted_path": list(range(kept))})
    return steps


def seed_tree_runs(
    db: Path, target: str, drafters: tuple[str, ...] = ("ngram", "suffix"), budgets: tuple[int, ...] = BUDGETS
) -> dict[tuple, AcceptanceCounter]:
    """Store RUNS_PER_CONFIG complete runs of each drafter at D=DRAFT_LEN and each of `budgets`, plus (with a
    tree budget) one tree run at T=0.7, a variant besides the budget; returns each (drafter, budget)'s
    counter fed the same steps."""
    rng = random.Random(11)
    store = RunStore(db)
    counters: dict[tuple, AcceptanceCounter] = {}
    configs = [(drafter, budget, 0.0) for drafter in drafters for budget in budgets]
    configs += [(drafters[0], budgets[-1], 0.7)] if budgets[-1] else []
    for config_index, (drafter, budget, temperature) in enumerate(configs):
        for run in range(RUNS_PER_CONFIG):
            run_id = f"{drafter}-{budget}-{temperature}-{run}"
            store.start_run(
                {
                    "run_id": run_id,
                    "kind": "sweep" if config_index % 2 else "generate",
                    "turns": ["hello"],
                    "target": target,
                    "drafter": drafter,
                    "draft_len": DRAFT_LEN,
                    "tree_budget": budget,
                    "tree_topk": 2 if budget else None,
                    "variant": variant_label(temperature, {}, budget),
                }
            )
            steps = made_up_steps(budget, rng)
            store.add_steps(run_id, steps)
            store.finish_run(run_id, status="complete")
            if not temperature:
                counter = counters.setdefault((drafter, budget), AcceptanceCounter())
                for step in steps:
                    counter.add_step(SimpleNamespace(**step))
    store.close()
    return counters
