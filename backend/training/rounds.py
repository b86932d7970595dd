"""Training rounds: newly trained weights replace the shipped ones only when they measure better on the
held-out evaluation suite, and the shipped card keeps a record of every round (data, tokens, time, AL by
category with CIs, the gain over the shipped weights with its CI, and whether it was shipped).

Both drafters are measured in the same run with the same settings on the same prompts (greedy AL is
deterministic for given weights, so each prompt's figure is exact); what is uncertain is whether a gain on
a few prompts per category holds on others. So a round's gain is paired: per prompt, the new AL minus the
shipped AL, averaged over the D values measured; the new weights ship when the 95% bootstrap CI of the mean
gain over prompts lies above zero. A round's score, shown beside it, is its mean AL over the suite's
(category, D) cells. Knows nothing about the mechanisms: drafters are built by name from their folders.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from backend.core.metrics import acceptance_length
from backend.core.models import LoadedModel
from backend.drafters import build_drafter
from backend.drafters.shipped import CARD_FILE, MODEL_CARD_FILE
from backend.lab.analysis import paired_gain_ci
from backend.training.card import read_card, suite_acceptance
from backend.training.loop import CHECKPOINT

ROUNDS_HEADING = "## Training rounds"


@dataclass(frozen=True)
class RoundOutcome:
    shipped: bool
    score: float  # the new weights' mean suite AL
    previous_score: float | None  # the shipped weights' (None: nothing was shipped)
    gain: tuple[float, float, float] | None  # mean AL gain per prompt over the shipped weights, 95% CI (low, high)


def suite_score(rows: list[dict]) -> float:
    """Mean AL over the (category, D) cells suite_acceptance measured."""
    return sum(row["al"] for row in rows) / max(1, len(rows))


def prompt_als(rows: list[dict]) -> dict[tuple[str, int], float]:
    """Each suite prompt's AL averaged over the D values measured, keyed by (category, index in the suite);
    a prompt that never drafted counts AL 1."""
    per_prompt: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        for index, (accepted, steps) in enumerate(row["prompts"]):
            al = acceptance_length(accepted, steps) if steps else 1.0
            per_prompt.setdefault((row["category"], index), []).append(al)
    return {key: sum(values) / len(values) for key, values in per_prompt.items()}


def al_gain(new: list[dict], old: list[dict]) -> tuple[float, float, float]:
    """The mean per-prompt AL gain of `new` over `old` (suite_acceptance rows of the same prompts and D values)
    with its 95% bootstrap CI over prompts: (gain, low, high)."""
    new_als, old_als = prompt_als(new), prompt_als(old)
    if new_als.keys() != old_als.keys():
        raise ValueError("the two drafters were not measured on the same suite prompts")
    keys = sorted(new_als)
    return paired_gain_ci([new_als[key] for key in keys], [old_als[key] for key in keys])


def ship_if_better(
    kind: str, target: LoadedModel, candidate: Path, shipped: Path, suite: list[dict], per_category: int
) -> RoundOutcome:
    """Measure the weights in `shipped` on the suite as `suite` (the candidate's rows) was measured, then copy
    the candidate's files (all but its checkpoint) over them if its paired AL gain's 95% CI lies above zero, or
    if nothing is shipped yet. Either way the round is appended to the shipped card's record and to the
    candidate's."""
    score, previous, gain = suite_score(suite), None, None
    shipped_card = read_card(shipped)
    rounds = _card_rounds(shipped_card) if shipped_card else []
    if (shipped / "config.json").is_file():
        old = build_drafter(kind, target, {"drafter_path": str(shipped)})
        draft_lens = tuple(sorted({row["draft_len"] for row in suite}))
        measured = suite_acceptance(target, old, draft_lens, per_category)
        previous, gain = suite_score(measured), al_gain(suite, measured)
    better = gain is None or gain[1] > 0
    candidate_card = read_card(candidate)
    record = {
        **_summary_fields(candidate_card),
        "date": datetime.now(UTC).date().isoformat(),
        "mean_al": score,
        "previous_mean_al": previous,
        "al_gain": None if gain is None else list(gain),
        "shipped": better,
    }
    rounds.append(record)
    _write_rounds(candidate, candidate_card, rounds)
    if better:
        shutil.rmtree(shipped, ignore_errors=True)
        shutil.copytree(candidate, shipped, ignore=shutil.ignore_patterns(CHECKPOINT, "*.tmp"))
    else:
        _write_rounds(shipped, shipped_card, rounds)
    return RoundOutcome(better, score, previous, gain)


def _card_rounds(card: dict) -> list[dict]:
    """The rounds a card records; a card from before rounds were kept counts as one shipped round."""
    if "rounds" in card:
        return list(card["rounds"])
    return [{**_summary_fields(card), "previous_mean_al": None, "shipped": True}]


def rounds_markdown(rounds: list[dict]) -> list[str]:
    """The model card's section on rounds, one table row each."""
    return [
        ROUNDS_HEADING,
        "",
        "Weights are replaced only when a round's AL gain over the shipped weights, measured prompt by prompt on",
        "the held-out suite with the same settings and averaged over D, has a 95% bootstrap CI above zero; rounds",
        "without a gain CI were decided on the mean AL, before this rule.",
        "",
        "| date | data | sequence tokens | training tokens | time (s) | mean suite AL | shipped AL then "
        "| AL gain (95% CI) | shipped |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
        *[
            f"| {r.get('date') or '-'} | {r['data']} | {r['train_sequence_tokens']} | {r['training_tokens']} | "
            f"{r['seconds']} | {_al(r['mean_al'])} | {_al(r['previous_mean_al'])} | {gain_text(r.get('al_gain'))} | "
            f"{'yes' if r['shipped'] else 'no'} |"
            for r in rounds
        ],
        "",
    ]


def _summary_fields(card: dict) -> dict:
    fields = ("data", "train_sequence_tokens", "training_tokens", "seconds", "suite")
    return {
        "date": card.get("date"),
        **{key: card.get(key) for key in fields},
        "mean_al": suite_score(card["suite"]) if card.get("suite") else None,
    }


def _write_rounds(folder: Path, card: dict, rounds: list[dict]) -> None:
    """Store `rounds` in the folder's card.json (whose contents are `card`) and (re)write the rounds section at
    the end of its model card."""
    (folder / CARD_FILE).write_text(json.dumps({**card, "rounds": rounds}, indent=1))
    readme = folder / MODEL_CARD_FILE
    text = readme.read_text() if readme.is_file() else ""
    kept = text.split(ROUNDS_HEADING)[0].rstrip("\n")
    readme.write_text("\n".join([kept, "", *rounds_markdown(rounds)]))


def _al(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def gain_text(gain: list[float] | tuple[float, float, float] | None) -> str:
    """A round's AL gain with its 95% CI, "+0.040 (+0.012 to +0.071)" ("-" when there is none)."""
    return "-" if gain is None else f"{gain[0]:+.3f} ({gain[1]:+.3f} to {gain[2]:+.3f})"
