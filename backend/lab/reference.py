"""The reference dataset: a real sweep of the default target, measured once on a named machine and
shipped as Parquet under data/reference/, so the analysis pages have something to show before the
user has measured anything. It is always labelled "reference: <machine, date, versions>" and kept
apart from the user's own results (the sweep carries the label; its runs have kind 'reference').

    export_reference(store, sweep_id, folder, label)   one stored sweep -> four Parquet files
    import_reference(store, folder)                     the files -> the store (idempotent)

The preset (`PRESET`) is what `python -m backend bench reference` measures. Knows nothing about models
or HTTP: the sweep itself is sweep.py's.
"""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.paths import shipped_data

if TYPE_CHECKING:  # the command line reads the preset without loading DuckDB
    from backend.lab.store import RunStore

REFERENCE_DIR = shipped_data() / "reference"
FILES = ("sweeps", "sweep_points", "runs", "steps")
# the step columns the Acceptance page reads (the token texts and probabilities stay out: size)
STEP_COLUMNS = "run_id, turn, step_index, draft_len, drafted, accepted, target_token, emitted, draft_s, verify_s"

# what `bench reference` sweeps: two model-free drafters and a shipped trained one, D in a few values
# (auto included), batch sizes 1 and 4, one prompt per suite category, 64 new tokens
PRESET = {
    "drafters": ["ngram", "suffix", "eagle3"],
    "draft_lens": [0, 2, 4, "auto"],
    "batch_sizes": [1, 4],
    "per_category": 1,
    "max_new_tokens": 64,
}


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def this_machine() -> str:
    """'<CPU model> (N cores)'."""
    return f"{cpu_model()} ({os.cpu_count()} cores)"


def reference_label(device: str, software: dict, when: datetime | None = None) -> str:
    """'reference: <CPU model> (N cores)[, device], <date>, SpecScope <version> (<commit>), torch <version>'."""
    when = when or datetime.now(UTC)
    machine = this_machine()
    if not device.startswith("cpu"):
        machine += f", {device}"
    commit = (software.get("git_commit") or "")[:10]
    version = f"SpecScope {software.get('specscope_version') or '?'}" + (f" ({commit})" if commit else "")
    return f"reference: {machine}, {when:%Y-%m-%d}, {version}, torch {software.get('torch_version')}"


def _quoted(value: Path | str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def export_reference(store: RunStore, sweep_id: str, folder: Path, label: str) -> list[Path]:
    """Write one stored sweep (its row labelled, its points, its runs as kind 'reference' and their
    steps' acceptance columns) as Parquet files in `folder`; returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    sweep, text = _quoted(sweep_id), _quoted(label)  # COPY takes no parameters: quoted literals
    queries = {
        "sweeps": f"SELECT * REPLACE ({text} AS reference) FROM sweeps WHERE sweep_id = {sweep}",
        "sweep_points": f"SELECT * FROM sweep_points WHERE sweep_id = {sweep}",
        "runs": f"SELECT * REPLACE ('reference' AS kind) FROM runs WHERE group_id = {sweep}",
        "steps": f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id IN (SELECT run_id FROM runs WHERE group_id = {sweep})",
    }
    written = []
    with store.connection() as db:
        for name, sql in queries.items():
            path = folder / f"{name}.parquet"
            db.execute(f"COPY ({sql}) TO {_quoted(path)} (FORMAT parquet, COMPRESSION zstd)")
            written.append(path)
    return written


def import_reference(store: RunStore, folder: Path | None = REFERENCE_DIR) -> int:
    """Bring the reference sweeps in `folder` into the store, once: a sweep already there is left as it
    is, and reference sweeps the folder no longer holds (an older reference) are removed with their
    points, runs and steps. Returns how many sweeps were imported (0 without a reference folder)."""
    if folder is None or not all((folder / f"{name}.parquet").is_file() for name in FILES):
        return 0
    files = {name: _quoted(folder / f"{name}.parquet") for name in FILES}
    with store.connection() as db:
        shipped = [row[0] for row in db.execute(f"SELECT sweep_id FROM read_parquet({files['sweeps']})").fetchall()]
        present = {row[0] for row in db.execute("SELECT sweep_id FROM sweeps WHERE reference IS NOT NULL").fetchall()}
        stale = sorted(present - set(shipped))
        new = [sweep_id for sweep_id in shipped if sweep_id not in present]
        if not stale and not new:
            return 0
        db.execute("BEGIN TRANSACTION")
        try:
            for sweep_id in stale:
                db.execute("DELETE FROM steps WHERE run_id IN (SELECT run_id FROM runs WHERE group_id = ?)", [sweep_id])
                for table, column in (("runs", "group_id"), ("sweep_points", "sweep_id"), ("sweeps", "sweep_id")):
                    db.execute(f"DELETE FROM {table} WHERE {column} = ?", [sweep_id])
            for sweep_id in new:
                db.execute(
                    f"INSERT INTO sweeps BY NAME SELECT * FROM read_parquet({files['sweeps']}) WHERE sweep_id = ?",
                    [sweep_id],
                )
                db.execute(
                    f"INSERT INTO sweep_points BY NAME SELECT * FROM read_parquet({files['sweep_points']}) "
                    "WHERE sweep_id = ?",
                    [sweep_id],
                )
                db.execute(
                    f"INSERT INTO runs BY NAME SELECT * FROM read_parquet({files['runs']}) WHERE group_id = ?",
                    [sweep_id],
                )
                db.execute(
                    f"INSERT INTO steps BY NAME SELECT s.* FROM read_parquet({files['steps']}) s "
                    f"JOIN read_parquet({files['runs']}) r USING (run_id) WHERE r.group_id = ?",
                    [sweep_id],
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return len(new)


def reference_labels(store: RunStore, target: str | None = None) -> list[str]:
    """The labels of the reference sweeps stored (for a target)."""
    with store.connection() as db:
        sql = "SELECT DISTINCT reference FROM sweeps WHERE reference IS NOT NULL"
        rows = db.execute(sql + (" AND target = ?" if target else ""), [target] if target else []).fetchall()
    return sorted(row[0] for row in rows)
