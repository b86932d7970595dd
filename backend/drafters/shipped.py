"""Where trained drafter weights are found: the folder a user names, else the one under data/drafters/
($SPECSCOPE_DRAFTERS) trained for this very target (its fingerprint in the folder's config.json).

A distilled student is a whole Hugging Face model folder; its record sits under STUDENT_MARKER in its
config.json. Beside the weights, card.json summarises the training (data, tokens, time, measured AL)
and README.md is the model card written from it. This module reads folders only; it knows nothing of
what the weights are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.core.paths import CHECKOUT_DATA, shipped_data

SHIPPED_DIR = shipped_data() / "drafters"
DISTILLED_DRAFT = "draft-model"  # the kind of a distilled student, a whole HF model folder
STUDENT_MARKER = "specscope_drafter"  # the key in a student's config.json naming its kind and target
CARD_FILE = "card.json"  # a trained drafter's training summary, beside its weights
MODEL_CARD_FILE = "README.md"


def trained_folders(target: LoadedModel, root: Path | None = None) -> dict[str, Path]:
    """The weights folders under `root` (default $SPECSCOPE_DRAFTERS, else data/drafters/) trained for this
    target (same fingerprint), by kind (the first folder in name order wins)."""
    root = root or Path(os.environ.get("SPECSCOPE_DRAFTERS", SHIPPED_DIR))
    found = {}
    for config in sorted(root.glob("*/config.json")):
        try:
            record = json.loads(config.read_text())
        except ValueError:
            continue
        record = record.get(STUDENT_MARKER, record)
        if (
            isinstance(record, dict)
            and record.get("kind")
            and record.get("target", {}).get("fingerprint") == target.fingerprint
        ):
            found.setdefault(record["kind"], config.parent)
    return found


def weights_folder(kind: str, target: LoadedModel, given: str | None) -> Path | str:
    """The folder `given`, else the one trained for `target`; a clear error naming the train command if none."""
    folder = given or trained_folders(target).get(kind)
    if folder is None:
        raise SpecScopeError(
            f"no trained {kind} drafter for '{target.spec}': train one with `python -m backend "
            f"train --kind {kind} --target {target.spec} --out data/drafters/{kind}-NAME`, or "
            "give its folder with --drafter-path"
        )
    return folder


def shown_path(path: Path) -> str:
    """`path` relative to the checkout (data/drafters/...) when it lies in it, else absolute."""
    path = path.resolve()
    return str(path.relative_to(CHECKOUT_DATA.parent)) if path.is_relative_to(CHECKOUT_DATA.parent) else str(path)


def drafter_card(folder: str | Path | None) -> dict | None:
    """What a weights folder says of its training: card.json's summary plus the model card (its path
    and markdown text); None for no folder, or a folder with neither file."""
    if folder is None:
        return None
    folder = Path(folder)
    try:
        card = json.loads((folder / CARD_FILE).read_text())
    except (OSError, ValueError):
        card = {}
    card = card if isinstance(card, dict) else {}
    readme = folder / MODEL_CARD_FILE
    if readme.is_file():
        card |= {"model_card": shown_path(readme), "model_card_text": readme.read_text()}
    return {**card, "folder": shown_path(folder)} if card else None
