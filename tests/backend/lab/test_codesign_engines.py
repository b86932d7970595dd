"""Co-design over a serving engine's points: an engine drafter is compared with the same engine's plain
decoding on the same deployment (engine version and hardware), never with SpecScope's or another
deployment's; failed points are left out; the command line prints a report without ρ."""

from __future__ import annotations

import pytest

from backend.cli.codesign import format_codesign
from backend.lab.codesign import codesign_report

FACTS = {"num_attention_heads": 4, "num_key_value_heads": 2}


def point(drafter: str, d: int, throughput: float, version: str = "1.0", device: str = "H200", **extra) -> dict:
    base = {"drafter": drafter, "draft_len": str(d), "batch_size": 1, "category": "all", "split": "all"}
    engine = {"engine": "vllm", "engine_version": version, "device": device} if "/" in drafter else {"compile": "off"}
    return base | engine | {"throughput_tps": throughput, "al": 1.5 if d else None, "status": "measured"} | extra


def test_an_engine_drafter_is_measured_against_its_own_deployments_plain_decoding():
    points = [  # newest first, as the store returns them
        point("vllm/ngram", 4, 300.0),
        point("vllm/none", 0, 200.0),
        point("vllm/ngram", 4, 90.0, version="0.9", device="A100"),
        point("vllm/none", 0, 100.0, version="0.9", device="A100"),
        point("vllm/ngram", 2, 0.0, status="failed", throughput_tps=None),
        point("none", 0, 10.0),
        point("ngram", 4, 12.0, rho=0.1),
    ]
    report = codesign_report(FACTS, points, "vllm/ngram")
    assert report["measured"] == {"4": pytest.approx(1.5)}  # 300 / 200 on the H200 deployment
    assert report["rho"] is None and report["predicted"] == {"4": None}
    assert "serving engine" in report["snippets_note"]
    printed = format_codesign(report)
    assert "measured rho = -" in printed and "   4   1.50          -     1.50x" in printed

    ours = codesign_report(FACTS, points, "ngram")
    assert ours["measured"] == {"4": pytest.approx(1.2)} and ours["rho"] == pytest.approx(0.1)


def test_without_a_drafter_the_fastest_at_batch_size_one_is_analysed():
    points = [
        point("vllm/ngram", 4, 300.0) | {"batch_size": 16},
        point("ngram", 4, 12.0, rho=0.1),
        point("vllm/ngram", 4, 11.0),
        point("none", 0, 10.0),
    ]
    assert codesign_report(FACTS, points)["drafter"] == "ngram"
