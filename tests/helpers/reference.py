"""A small reference dataset built the way `bench reference` builds the shipped one (a real sweep into
a scratch store, exported as Parquet), from whatever target a test has: the import path is tested
without the shipped files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from backend.core.models import LoadedModel
from backend.drafters import DrafterOptions
from backend.lab.prompts import Question
from backend.lab.recorder import software
from backend.lab.reference import export_reference, reference_label
from backend.lab.store import RunStore
from backend.lab.sweep import run_sweep

QUESTIONS = [
    Question(i, "copy" if i % 2 else "chat", (" ".join(f"w{(i * 5 + j) % 9 + 5}" for j in range(14)),))
    for i in range(4)
]


def build_reference(
    target: LoadedModel,
    folder: Path,
    name: str | None = None,
    drafters: tuple[str, ...] = ("ngram",),
    draft_lens: tuple = (0, 2, 4),
    batch_sizes: tuple[int, ...] = (1, 2),
    questions: list[Question] = QUESTIONS,
) -> str:
    """Sweep `target` (stored under the target name `name`, default its spec) and write the reference
    Parquet files into `folder`; returns the sweep id."""
    target = dataclasses.replace(target, spec=name) if name else target
    store = RunStore(folder.parent / f"{folder.name}-build.duckdb")
    try:
        report = run_sweep(
            target, questions, list(drafters), list(draft_lens), list(batch_sizes), 12, DrafterOptions(), store
        )
        export_reference(store, report["sweep_id"], folder, reference_label(str(target.device), software()))
    finally:
        store.close()
    return report["sweep_id"]
