"""The run store: migrations from empty, typed filters, and recovery of runs cut short by a kill."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import duckdb
import httpx
import pytest

from backend.core.metrics import AcceptanceCounter
from backend.lab.analysis import acceptance_groups
from backend.lab.store import RunStore
from backend.lab.store_schema import MIGRATIONS
from backend.serving.bodies import MAX_NEW_TOKENS
from backend.serving.live import FLUSH_EVERY_STEPS
from tests.helpers.tiny import save_tiny, tiny_llama
from tests.helpers.workers import WorkerProcess


def run_row(run_id: str, **extra) -> dict:
    return {
        "run_id": run_id,
        "kind": "generate",
        "turns": ["hello"],
        "target": "t",
        "drafter": "ngram",
        "draft_len": 4,
        **extra,
    }


def test_migrations_from_empty_and_reopen(tmp_path):
    store = RunStore(tmp_path / "a.duckdb")
    assert store.schema_version() == MIGRATIONS[-1][0]
    store.close()
    again = RunStore(tmp_path / "a.duckdb")  # nothing re-applied, nothing lost
    assert again.schema_version() == MIGRATIONS[-1][0]
    assert again.runs().empty


def test_a_version_3_file_gains_the_software_columns_and_keeps_its_runs(tmp_path):
    path = tmp_path / "v3.duckdb"
    db = duckdb.connect(str(path))
    db.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
    for version, sql in MIGRATIONS[:3]:
        db.execute(sql)
        db.execute("INSERT INTO schema_version VALUES (?, now())", [version])
    db.execute(
        "INSERT INTO runs (run_id, kind, status, created_at, turns, target, drafter, draft_len) "
        "VALUES ('old', 'generate', 'complete', now(), '[\"hi\"]', 't', 'ngram', '2')"
    )
    db.close()
    store = RunStore(path)
    assert store.schema_version() == MIGRATIONS[-1][0]
    old = store.run("old")
    assert old["status"] == "complete" and old["specscope_version"] is None and old["git_commit"] is None
    store.start_run(run_row("new", specscope_version="0.1.0", git_commit="abc123"))
    assert (store.run("new")["specscope_version"], store.run("new")["git_commit"]) == ("0.1.0", "abc123")
    store.start_sweep("s", "t", "f", "cpu", {})
    store.add_sweep_points(
        "s",
        [
            {
                "drafter": "ngram",
                "draft_len": 2,
                "batch_size": 1,
                "category": "all",
                "split": "all",
                "specscope_version": "0.1.0",
                "git_commit": "abc123",
            }
        ],
    )
    [point] = store.sweep_points("s").to_dict(orient="records")
    assert (point["specscope_version"], point["git_commit"], point["draft_len"]) == ("0.1.0", "abc123", "2")


def test_runs_steps_and_filters(tmp_path):
    store = RunStore(tmp_path / "b.duckdb")
    store.start_run(run_row("r1", category="coding"))
    store.start_run(run_row("r2", drafter="suffix", draft_len="auto"))
    step = {
        "index": 0,
        "turn": 0,
        "draft_len": 4,
        "drafted": [5, 6],
        "draft_probs": None,
        "target_probs": [0.9, 0.1],
        "accepted": 1,
        "target_token": 7,
        "target_token_prob": 0.5,
        "emitted": [5, 7],
        "draft_s": 0.001,
        "verify_s": 0.05,
        "stop_reason": None,
        "finish_reason": None,
        "drafted_text": ["a", "b"],
        "emitted_text": ["a", "c"],
        "target_text": "c",
    }
    store.add_steps("r1", [step, {**step, "index": 1}])
    store.finish_run("r1", status="complete", al=2.0, new_tokens=4)
    assert store.run("r1")["status"] == "complete" and store.run("r2")["status"] == "running"
    steps = store.steps("r1")
    assert list(steps["step_index"]) == [0, 1] and list(steps.iloc[0]["drafted"]) == [5, 6]
    assert list(store.runs(drafter="suffix")["run_id"]) == ["r2"]
    assert list(store.runs(category="coding")["run_id"]) == ["r1"]
    assert list(store.runs(draft_len="auto")["run_id"]) == ["r2"]
    assert json.loads(store.run("r2")["turns"]) == ["hello"]
    with pytest.raises(ValueError):
        store.finish_run("r1", target="evil")  # only result fields may change


def test_the_sql_aggregates_equal_the_acceptance_counter_on_the_same_stored_runs(tmp_path):
    store = RunStore(tmp_path / "acc.duckdb")
    pattern = {
        "r1": [(3, 3), (3, 0), (3, 1), (0, 0)],
        "r2": [(3, 2), (2, 2), (1, 0)],
        "r3": [(3, 3)],
        "r4": [(2, 1)],
    }  # (drafted, accepted) per step; r4 fails and is left out
    for run_id, steps in pattern.items():
        store.start_run(run_row(run_id, draft_len=3, category="chat" if run_id != "r3" else "code"))
        store.add_steps(
            run_id,
            [
                {
                    "index": i,
                    "turn": 0,
                    "draft_len": 3,
                    "drafted": list(range(10, 10 + n)),
                    "accepted": a,
                    "emitted": list(range(a + 1)),
                    "draft_s": 0.0,
                    "verify_s": 0.01,
                }
                for i, (n, a) in enumerate(steps)
            ],
        )
        store.finish_run(run_id, status="failed" if run_id == "r4" else "complete")
    tables = [table.to_dict(orient="records") for table in store.acceptance_tables(target="t").values()]
    [pooled] = acceptance_groups(*tables, pool_categories=True)

    counter = AcceptanceCounter()
    for run_id in ("r1", "r2", "r3"):  # fed step by step from the stored rows
        for step in store.steps(run_id).itertuples():
            counter.add(len(step.drafted), step.accepted)
    expected = counter.stats()
    assert pooled["drafting_steps"] == expected.drafting_steps == 7 and pooled["runs"] == 3
    assert pooled["al"] == pytest.approx(expected.al) == pytest.approx(1 + 11 / 7)
    assert pooled["acceptance_rate"] == pytest.approx(expected.acceptance_rate) == pytest.approx(11 / 18)
    assert pooled["histogram"] == expected.histogram == [2, 1, 2, 2]
    assert pooled["survival"] == pytest.approx(expected.survival)
    assert pooled["conditional"] == pytest.approx(expected.conditional)
    by_category = acceptance_groups(*tables)
    assert [(g["category"], g["drafting_steps"]) for g in by_category] == [("chat", 6), ("code", 1)]
    assert (
        acceptance_groups(*(t.to_dict(orient="records") for t in store.acceptance_tables(target="other").values()))
        == []
    )


def test_tree_runs_are_their_own_group_counted_by_depth(tmp_path):
    """A tree step of 5 nodes, 3 deep, that kept 2: 5 drafted tokens, positions 1..3 reached as a chain
    of depth 3 would be, and the SQL agrees with the counter fed the same steps."""
    store = RunStore(tmp_path / "trees.duckdb")
    store.start_run(run_row("chain", draft_len=3))
    store.start_run(run_row("tree", draft_len=3, tree_budget=8, tree_topk=2, variant="tree=8"))
    chain_step = {"index": 0, "turn": 0, "drafted": [1, 2, 3], "accepted": 1, "emitted": [1, 9]}
    tree_steps = [
        {
            **chain_step,
            "drafted": [1, 2, 4, 5, 6],
            "parents": [-1, 0, -1, 1, 2],
            "accepted": 2,
            "accepted_path": [0, 1],
        },
        {**chain_step, "index": 1, "drafted": [7, 8], "parents": [-1, -1], "accepted": 0, "accepted_path": []},
    ]
    store.add_steps("chain", [chain_step])
    store.add_steps("tree", tree_steps)
    for run_id in ("chain", "tree"):
        store.finish_run(run_id, status="complete")
    assert list(store.steps("tree")["tree_depth"]) == [3, 1]
    assert store.steps("chain")["tree_depth"].isna().all()
    tables = [table.to_dict(orient="records") for table in store.acceptance_tables(target="t").values()]
    groups = {group["drafter"]: group for group in acceptance_groups(*tables, pool_categories=True)}
    assert set(groups) == {"ngram", "ngram [tree=8]"}
    counter = AcceptanceCounter()
    for step in tree_steps:
        counter.add_step(SimpleNamespace(**step))
    expected = counter.stats()
    tree = groups["ngram [tree=8]"]
    assert expected.drafted_tokens == 7 and expected.histogram == [1, 0, 1, 0]
    assert expected.acceptance_rate == pytest.approx(2 / 7)
    assert tree["acceptance_rate"] == pytest.approx(expected.acceptance_rate)
    assert tree["histogram"] == expected.histogram
    assert expected.survival == pytest.approx([0.5, 0.5, 0.0])
    assert tree["survival"] == pytest.approx(expected.survival)


def test_open_runs_become_incomplete_at_the_next_start(tmp_path):
    store = RunStore(tmp_path / "c.duckdb")
    store.start_run(run_row("r1"))
    store.close()
    reopened = RunStore(tmp_path / "c.duckdb")
    assert reopened.recovered == 1 and reopened.run("r1")["status"] == "incomplete"


@pytest.mark.slow
def test_a_run_killed_mid_way_keeps_its_steps_and_is_marked_incomplete(tmp_path):
    db = tmp_path / "killed.duckdb"
    longest = MAX_NEW_TOKENS  # a tiny model decodes ~1,000 tokens/s: the run must outlast the kill
    worker = WorkerProcess(db, str(save_tiny(tiny_llama(max_context=2 * longest), tmp_path / "tiny")))
    try:
        worker.wait_ready()
        body = {"prompt": "w5 w9 w13", "drafter": "none", "draft_len": 0, "max_new_tokens": longest, "baseline": False}
        with httpx.stream("POST", worker.url + "/generate", json=body, timeout=60) as reply:
            lines = reply.iter_lines()
            run_id = json.loads(next(lines))["run_id"]
            steps_seen = 0
            for line in lines:
                steps_seen += json.loads(line)["type"] == "step"
                if steps_seen == FLUSH_EVERY_STEPS + 1:  # the worker stored the first steps before deciding this one
                    worker.process.send_signal(signal.SIGKILL)
                    break
        worker.process.wait(timeout=10)
    finally:
        worker.stop()
    store = RunStore(db)
    run = store.run(run_id)
    assert run["status"] == "incomplete"
    assert FLUSH_EVERY_STEPS <= len(store.steps(run_id)) < longest
