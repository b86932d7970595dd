"""--distil-minutes bounds each split's distillation as a whole: with the mix teacher, the prefilled readings get
what the generated answers left of the time, not a bound of their own."""

from __future__ import annotations

import argparse
from pathlib import Path

from backend.training import run
from backend.training.dataset import DistilledData


def distilled_minutes(monkeypatch, distil_minutes: float | None, spends: list[float]) -> list[float | None]:
    """The `minutes` each source's distillation was given when source i takes `spends[i]` minutes."""
    clock = [1000.0]
    given: list[float | None] = []

    def fake_distil(target, source, layers, split, *args, minutes=None, **kwargs) -> DistilledData:
        given.append(minutes)
        clock[0] += 60 * spends[len(given) - 1]
        return DistilledData((Path(f"/cache/{len(given)}"),), layers, split)

    monkeypatch.setattr(run, "distil", fake_distil)
    monkeypatch.setattr(run.time, "monotonic", lambda: clock[0])
    args = argparse.Namespace(distil_minutes=distil_minutes, answer_tokens=64, distil_batch=8, distil_seed=0)
    data = run._distil_teacher(None, args, [["instructions"], ["readings"]], (1, 2), "train", 1000)
    assert data.folders == (Path("/cache/1"), Path("/cache/2")) and data.split == "train"
    return given


def test_the_sources_share_one_time_bound(monkeypatch):
    assert distilled_minutes(monkeypatch, 30.0, [18.0, 5.0]) == [30.0, 12.0]


def test_a_source_that_starts_after_the_bound_reads_only_its_cache(monkeypatch):
    assert distilled_minutes(monkeypatch, 10.0, [12.0, 5.0]) == [10.0, 0.0]


def test_without_a_bound_every_source_distils_its_budget(monkeypatch):
    assert distilled_minutes(monkeypatch, None, [12.0, 5.0]) == [None, None]
