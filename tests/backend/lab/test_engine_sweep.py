"""Sweeps against a serving engine (the fake engine of tests/backend/engines, launched as a real server
process per D): every point stored as it is measured with the engine's version and configuration; an
engine that dies mid-sweep leaves its failed points stored with their error and the sweep resumable;
resuming measures only what is missing."""

from __future__ import annotations

import json
import sys

import pytest

from backend.core.errors import SpecScopeError
from backend.lab.engine_sweep import EngineSweep, run_engine_sweep
from backend.lab.store import RunStore
from tests.backend.engines.fake_engine import DRAFT, FakeEngine

PROMPTS = ["one", "two", "three"]
FAKE = f"{sys.executable} -m tests.backend.engines.fake_engine --engine vllm --port {{port}} --draft-len {{draft_len}}"


@pytest.fixture
def store(tmp_path):
    opened = RunStore(tmp_path / "runs.duckdb")
    yield opened
    opened.close()


def sweep(**changes) -> EngineSweep:
    settings = {"engine": "vllm", "prompts": PROMPTS, "concurrency": [1, 3], "max_new_tokens": 6}
    return EngineSweep(**(settings | {"launch": FAKE, "draft_lens": [2, 4], "method": "ngram"} | changes))


def test_each_point_is_stored_with_the_engines_version_and_configuration(store):
    report = run_engine_sweep(sweep(), store)
    assert report["status"] == "complete" and len(report["points"]) == 4
    row = store.sweeps().iloc[0]
    assert (row["engine"], row["engine_version"], row["target"], row["status"]) == (
        "vllm",
        "vllm-fake-1.0",
        "fake-model",  # what the server lists at /v1/models
        "complete",
    )
    config = json.loads(row["engine_config"])
    assert config["launch"] == FAKE and config["method"] == "ngram" and config["served_model"] == "fake-model"
    assert "cores" in row["device"]  # a launched server runs on this machine
    points = store.sweep_points(target="fake-model")
    configs = sorted(zip(points["draft_len"], points["batch_size"], strict=True))
    assert configs == [("2", 1), ("2", 3), ("4", 1), ("4", 3)]
    assert set(points["drafter"]) == {"vllm/ngram"} and set(points["status"]) == {"measured"}
    assert points["al"].tolist() == pytest.approx([2.0] * 4)  # the fake accepts one draft per step
    by_d = points.groupby("draft_len")["acceptance_rate"].first()
    assert by_d["2"] == pytest.approx(1 / 2) and by_d["4"] == pytest.approx(1 / 4)  # each server its own D
    assert (points["ttft_s"] > 0).all() and (points["tpot_s_p90"] >= points["tpot_s_p50"]).all()
    assert (points["engine"] == "vllm").all()


def test_a_running_server_is_measured_as_it_is(store):
    with FakeEngine("llamacpp") as server:
        report = run_engine_sweep(
            sweep(engine="llamacpp", launch=None, url=server.url, draft_lens=[DRAFT], target="mine"), store
        )
    assert [(p["drafter"], p["draft_len"]) for p in report["points"]] == [("llamacpp/ngram", str(DRAFT))] * 2
    row = store.sweeps().iloc[0]
    where = f"the server at {server.url.removeprefix('http://')}"
    assert (row["target"], row["device"], row["engine_version"]) == ("mine", where, "b1-fake")
    assert json.loads(row["engine_config"])["url"] == server.url


def test_an_engine_that_dies_mid_sweep_leaves_failed_points_and_a_resumable_sweep(store):
    dying = FAKE + " --exit-after 3"  # answers the 3 requests of concurrency 1, dies during concurrency 3
    report = run_engine_sweep(sweep(launch=dying, draft_lens=[2]), store)
    assert report["status"] == "incomplete"
    measured, failed = report["points"]
    assert measured["status"] == "measured" and measured["batch_size"] == 1
    assert failed["status"] == "failed" and failed["batch_size"] == 3
    assert failed["error"].startswith("the server stopped answering:")
    stored = store.sweep_points(report["sweep_id"])
    assert sorted(stored["status"]) == ["failed", "measured"]
    assert store.sweeps().iloc[0]["status"] == "incomplete"

    resumed = run_engine_sweep(sweep(draft_lens=[2]), store, resume=report["sweep_id"])
    assert resumed["sweep_id"] == report["sweep_id"] and resumed["status"] == "complete"
    assert [p["batch_size"] for p in resumed["points"]] == [3]  # only what was missing
    stored = store.sweep_points(report["sweep_id"])
    assert sorted(stored["batch_size"]) == [1, 3] and set(stored["status"]) == {"measured"}
    assert store.sweeps().iloc[0]["status"] == "complete"


def test_a_server_that_never_starts_stores_nothing_and_says_why(store):
    with pytest.raises(SpecScopeError, match="no vllm server came up, so nothing was stored: the server exited"):
        run_engine_sweep(sweep(launch=f"{sys.executable} -c 'print(1)' {{port}}", draft_lens=[2]), store)
    assert store.sweeps().empty


def test_a_server_that_fails_after_another_came_up_is_stored_failed(store):
    failing = FAKE.replace("--engine vllm", "--engine vllm --exit-after 0")  # dies on its first request
    report = run_engine_sweep(sweep(launch=failing, draft_lens=[2]), store)
    assert [p["status"] for p in report["points"]] == ["failed", "failed"]  # the rest of its levels too
    assert len(store.sweep_points(report["sweep_id"])) == 2 and store.sweeps().iloc[0]["status"] == "incomplete"


def test_a_resumed_sweep_must_be_the_same_grid_on_the_same_engine(store):
    first = run_engine_sweep(sweep(draft_lens=[2], concurrency=[1]), store)
    for changes in ({"draft_lens": [2, 4]}, {"concurrency": [1, 2]}, {"method": "eagle3"}):
        with pytest.raises(SpecScopeError, match="resume it with the same --engine, --method, --draft-lens"):
            run_engine_sweep(
                sweep(**({"draft_lens": [2], "concurrency": [1]} | changes)), store, resume=first["sweep_id"]
            )
    with pytest.raises(SpecScopeError, match="no sweep nope in"):
        run_engine_sweep(sweep(), store, resume="nope")
    assert len(store.sweep_points(first["sweep_id"])) == 1  # nothing lost


def test_a_refused_resume_leaves_failed_points_and_the_status_as_they_were(store):
    first = run_engine_sweep(sweep(launch=FAKE + " --exit-after 3", draft_lens=[2]), store)
    assert first["status"] == "incomplete"
    with pytest.raises(SpecScopeError, match="resume it with the same"):
        run_engine_sweep(sweep(draft_lens=[2, 4]), store, resume=first["sweep_id"])
    assert sorted(store.sweep_points(first["sweep_id"])["status"]) == ["failed", "measured"]
    assert store.sweep(first["sweep_id"])["status"] == "incomplete"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"launch": None}, "give either a server URL or a launch command template"),
        ({"draft_lens": []}, "a launch template needs the D values"),
        ({"launch": None, "url": "http://127.0.0.1:9", "draft_lens": [2, 4]}, "a running server has one D"),
        ({"launch": "serve --port 1"}, "must contain {port}"),
        ({"launch": "serve 'unclosed {port}"}, "cannot be split into arguments"),
    ],
)
def test_bad_settings_are_one_sentence(changes, message):
    with pytest.raises(ValueError, match=message):
        sweep(**changes)
