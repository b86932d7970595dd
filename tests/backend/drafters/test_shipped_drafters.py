"""The trained drafters shipped in data/drafters/: one folder per kind, made for the embedded default (its
GGUF's fingerprint), within the size budget (20 MB each, 80 MB in all, checkpoints excluded: they are not
committed), each with a model card holding its validation curve (read from disk, no model loaded); and,
in the slow set, with the real default model, the very drafts each one proposes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.verify import SamplingParams
from backend.drafters import SHIPPED_DIR, STUDENT_MARKER, build_drafter
from backend.lab.prompts import encode_conversation

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


RECORDED = json.loads((Path(__file__).parent / "shipped_drafts.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ("eagle3", "mtp", "dflash", "dspark"))
@pytest.mark.parametrize("temperature", (0.0, 0.8))
def test_shipped_drafters_propose_the_recorded_drafts(default_model, kind, temperature):
    """Every step's drafts on a fixed prompt, token for token, as recorded with these very weights. Greedy
    drafts were recorded before the kinds moved onto shared parts (draft layer, RoPE, folder format, sampling
    helper) and still match. Sampled drafts (T = 0.8) were recorded again after the rejection rule's
    correction draw changed to one uniform per step (the same distribution, another draw from the same seed),
    so they guard against regressions from there on. A training round that replaces shipped weights records
    that kind's drafts again (eagle3 and dspark after each of their rounds on chat data). They were recorded
    with the weights held in float32: in float16 (head_precision's default on a CPU) a draft may differ where
    two draft logits lie within half-precision rounding (tests/backend/drafters/test_head_precision.py)."""
    engine = SpeculativeEngine(default_model.model, default_model.eos_token_ids, default_model.facts.max_context)
    prompt = encode_conversation(default_model.tokenizer, [RECORDED["prompt"]], [])
    settings = GenerationSettings(
        RECORDED["new_tokens"],
        draft_len=RECORDED["draft_len"],
        sampling=SamplingParams(temperature=temperature),
        seed=RECORDED["seed"],
    )
    drafter = build_drafter(kind, default_model, {"head_precision": "float32"})
    steps = engine.generate(prompt, drafter, settings).run().steps
    assert [step.drafted for step in steps] == RECORDED["drafts"][kind][str(temperature)]
