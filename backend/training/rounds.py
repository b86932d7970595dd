"""Training rounds: newly trained weights replace the shipped ones only when they measure better on the
held-out evaluation suite, and the shipped card keeps a record of every round (data, tokens, time, AL by
category with CIs, and whether it was shipped).

Both drafters are measured in the same run with the same settings (greedy AL is deterministic for given
weights, so the comparison is exact, not noisy). A round's score is its mean AL over the suite's
(category, D) cells. Knows nothing about the mechanisms: drafters are built by name from their folders.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from backend.core.models import LoadedModel
from backend.drafters import build_drafter
from backend.drafters.shipped import CARD_FILE, MODEL_CARD_FILE
from backend.training.card import read_card, suite_acceptance
from backend.training.loop import CHECKPOINT

ROUNDS_HEADING = "## Training rounds"


@dataclass(frozen=True)
class RoundOutcome:
    shipped: bool
    score: float  # the new weights' mean suite AL
    previous_score: float | None  # the shipped weights' (None: nothing was shipped)


def suite_score(rows: list[dict]) -> float:
    """Mean AL over the (category, D) cells suite_acceptance measured."""
    return sum(row["al"] for row in rows) / max(1, len(rows))


def ship_if_better(
    kind: str, target: LoadedModel, candidate: Path, shipped: Path, suite: list[dict], per_category: int
) -> RoundOutcome:
    """Measure the weights in `shipped` on the suite as `suite` (the candidate's rows) was measured, then copy
    the candidate's files (all but its checkpoint) over them if its score is higher, or if nothing is shipped
    yet. Either way the round is appended to the shipped card's record and to the candidate's."""
    score, previous = suite_score(suite), None
    shipped_card = read_card(shipped)
    rounds = _card_rounds(shipped_card) if shipped_card else []
    if (shipped / "config.json").is_file():
        old = build_drafter(kind, target, {"drafter_path": str(shipped)})
        draft_lens = tuple(sorted({row["draft_len"] for row in suite}))
        previous = suite_score(suite_acceptance(target, old, draft_lens, per_category))
    better = previous is None or score > previous
    candidate_card = read_card(candidate)
    record = {
        **_summary_fields(candidate_card),
        "date": datetime.now(UTC).date().isoformat(),
        "mean_al": score,
        "previous_mean_al": previous,
        "shipped": better,
    }
    rounds.append(record)
    _write_rounds(candidate, candidate_card, rounds)
    if better:
        shutil.rmtree(shipped, ignore_errors=True)
        shutil.copytree(candidate, shipped, ignore=shutil.ignore_patterns(CHECKPOINT, "*.tmp"))
    else:
        _write_rounds(shipped, shipped_card, rounds)
    return RoundOutcome(better, score, previous)


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
        "Weights are replaced only when a round measures a higher mean AL on the held-out suite (same settings).",
        "",
        "| date | data | sequence tokens | training tokens | time (s) | mean suite AL | shipped AL then | shipped |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        *[
            f"| {r.get('date') or '-'} | {r['data']} | {r['train_sequence_tokens']} | {r['training_tokens']} | "
            f"{r['seconds']} | {_al(r['mean_al'])} | {_al(r['previous_mean_al'])} | {'yes' if r['shipped'] else 'no'} |"
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
