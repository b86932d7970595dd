"""The reference dataset: a real (tiny) sweep exported as Parquet, imported into a fresh store once,
kept apart from the user's own results, replaced when a newer reference is shipped, and labelled
with the machine, date and versions."""

from __future__ import annotations

import re

import pytest

from backend.lab.recorder import software
from backend.lab.reference import FILES, REFERENCE_DIR, import_reference, reference_label, reference_labels
from backend.lab.store import RunStore
from tests.helpers.reference import build_reference


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ref") / "reference"
    sweep_id = build_reference(tiny, folder)
    return folder, sweep_id


def counts(store: RunStore) -> dict[str, int]:
    with store.connection() as db:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in FILES}


def test_a_fresh_store_imports_the_reference_once_and_keeps_it_apart(reference, tmp_path):
    folder, sweep_id = reference
    assert all((folder / f"{name}.parquet").stat().st_size < 1_000_000 for name in FILES)
    store = RunStore(tmp_path / "fresh.duckdb")
    assert import_reference(store, folder) == 1
    imported = counts(store)
    assert imported["sweep_points"] > 0 and imported["runs"] == 3 * 2 * 4 and imported["steps"] > 0
    assert import_reference(store, folder) == 0 and counts(store) == imported  # idempotent

    [label] = reference_labels(store, "tiny-0")
    assert label.startswith("reference: ") and f"torch {software()['torch_version']}" in label
    [sweep] = store.sweeps().to_dict(orient="records")
    assert sweep["sweep_id"] == sweep_id and sweep["status"] == "complete" and sweep["reference"] == label
    assert not store.sweep_points(target="tiny-0", reference=True).empty
    assert store.sweep_points(target="tiny-0", reference=False).empty
    assert set(store.runs()["kind"]) == {"reference"}

    # the Acceptance aggregates leave the reference out unless asked for it
    assert store.acceptance_tables(target="tiny-0")["runs"].empty
    asked = store.acceptance_tables(target="tiny-0", kinds=["reference"])
    assert set(asked["runs"]["drafter"]) == {"ngram"} and set(asked["runs"]["draft_len"]) == {"2", "4"}
    store.close()


def test_a_newer_reference_replaces_the_older_one(reference, tiny, tmp_path):
    folder, old_id = reference
    store = RunStore(tmp_path / "upgrade.duckdb")
    import_reference(store, folder)
    newer = tmp_path / "newer"
    new_id = build_reference(tiny, newer, drafters=("suffix",), draft_lens=(0, 3), batch_sizes=(1,))
    assert import_reference(store, newer) == 1
    assert list(store.sweeps()["sweep_id"]) == [new_id]
    assert set(store.sweep_points()["drafter"]) == {"none", "suffix"}
    assert set(store.runs()["group_id"]) == {new_id}
    with store.connection() as db:
        orphans = db.execute("SELECT count(*) FROM steps WHERE run_id NOT IN (SELECT run_id FROM runs)").fetchone()
    assert orphans[0] == 0
    store.close()


def test_no_reference_folder_imports_nothing(tmp_path):
    store = RunStore(tmp_path / "none.duckdb")
    assert import_reference(store, tmp_path / "missing") == 0 and import_reference(store, None) == 0
    assert store.sweeps().empty
    store.close()


def test_the_label_names_machine_date_and_versions():
    label = reference_label("cpu", {"torch_version": "2.0", "specscope_version": "0.1.0", "git_commit": "abcdef123456"})
    pattern = r"reference: .+ \(\d+ cores\), \d{4}-\d\d-\d\d, SpecScope 0\.1\.0 \(abcdef1234\), torch 2\.0"
    assert re.fullmatch(pattern, label)
    assert ", cuda:0," in reference_label("cuda:0", {"torch_version": "2.0"})


def test_the_shipped_reference_is_the_default_targets_lossless_sweep(tmp_path):
    assert all((REFERENCE_DIR / f"{name}.parquet").stat().st_size < 1_000_000 for name in FILES)
    store = RunStore(tmp_path / "shipped.duckdb")
    assert import_reference(store, REFERENCE_DIR) == 1
    [label] = reference_labels(store, "default")
    assert re.fullmatch(r"reference: .+ \(\d+ cores\).*, \d{4}-\d\d-\d\d, SpecScope .+, torch .+", label)
    points = store.sweep_points(target="default", reference=True)
    assert {"none", "ngram", "suffix", "eagle3"} <= set(points["drafter"]) and points["lossless"].all()
    store.close()
