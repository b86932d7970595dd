"""The trained drafters shipped in data/drafters/ (read from disk, no model loaded): one folder per kind,
made for the embedded default (its GGUF's fingerprint), within the size budget (20 MB each, 80 MB in
all, checkpoints excluded: they are not committed), each with a model card holding its validation curve."""

from __future__ import annotations

import json

import pytest

from backend.drafters import SHIPPED_DIR, STUDENT_MARKER

DEFAULT_FINGERPRINT = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # sha256 of the GGUF file
KINDS = ("eagle3", "mtp", "dflash", "dspark", "draft-model")
MB = 1_000_000


def shipped_bytes(folder) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name != "checkpoint.pt")


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_shipped_for_the_default_within_20_mb_with_a_card(kind):
    folder = SHIPPED_DIR / f"{kind}-smollm2"
    record = json.loads((folder / "config.json").read_text())
    record = record.get(STUDENT_MARKER, record)
    assert record["kind"] == kind and record["target"]["fingerprint"] == DEFAULT_FINGERPRINT
    assert shipped_bytes(folder) <= 20 * MB
    card = (folder / "README.md").read_text()
    assert "## Validation curve" in card and "| training tokens |" in card


def test_all_shipped_drafters_together_fit_80_mb():
    assert sum(shipped_bytes(SHIPPED_DIR / f"{kind}-smollm2") for kind in KINDS) <= 80 * MB
