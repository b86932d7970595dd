"""`bench speed`'s speedups: end to end (prefill included) and decode-only (prefill left out), per prompt
then geometric means, from measured seconds."""

from __future__ import annotations

import pytest

from backend.lab.bench import Measurement, _figures


def _run(seconds: float, decode_seconds: float | None) -> Measurement:
    return Measurement(list(range(10)), 10, seconds, decode_seconds=decode_seconds)


def test_decode_only_speedup_leaves_the_prefill_out():
    # both spend 1 s on the prefill; the drafter decodes in 0.5 s what plain decodes in 1 s
    per_prompt = [{"plain": _run(2.0, 1.0), "ngram@4": _run(1.5, 0.5), "hf-assisted@4": _run(1.6, None)}]
    ours = _figures(per_prompt, "ngram@4", [0], None)
    assert ours["speedup_vs_plain"] == pytest.approx(2.0 / 1.5)
    assert ours["decode_speedup_vs_plain"] == pytest.approx(2.0)
    assert _figures(per_prompt, "hf-assisted@4", [0], None)["decode_speedup_vs_plain"] is None


def test_speedups_are_geometric_means_over_prompts():
    per_prompt = [
        {"plain": _run(2.0, 1.0), "suffix@auto": _run(1.0, 0.25)},  # decode-only 4x
        {"plain": _run(2.0, 1.0), "suffix@auto": _run(4.0, 1.0)},  # decode-only 1x
    ]
    figures = _figures(per_prompt, "suffix@auto", [0, 1], None)
    assert figures["decode_speedup_vs_plain"] == pytest.approx(2.0)
    assert figures["speedup_vs_plain"] == pytest.approx(1.0)
    assert figures["equal"] == 2
