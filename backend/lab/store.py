"""The run store: a DuckDB file holding every run and every engine step, with numbered migrations.

Only the worker process writes (the dashboard reads through the worker). A run is inserted as
`running` when it starts; its steps are appended in batches as it goes; it ends `complete`,
`cancelled` or `failed`. A worker that dies mid-run leaves `running` rows behind: the next start
marks them `incomplete`, so they are kept (with the steps that were stored) but never shown as
complete. No method accepts SQL text from outside: filters are typed arguments.

The migrations (store_schema.py) are the one declaration of the schema: the columns (and their types) that rows are
written with are read back from the migrated file when it opens.

Knows nothing about models or HTTP; it stores plain dicts and returns pandas DataFrames.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from backend.core.errors import SpecScopeError
from backend.core.metrics import tree_depth
from backend.core.paths import user_data
from backend.lab.store_schema import DEFAULT_KINDS, DEFAULT_STATUSES, FINAL_FIELDS, MIGRATIONS, TABLES

DEFAULT_DB = user_data() / "specscope.duckdb"


def _equal_to(*pairs: tuple[str, object]) -> tuple[list[str], list]:
    """SQL conditions `column = ?` (and their values) for the pairs whose value is given."""
    given = [(column, value) for column, value in pairs if value is not None]
    return [f"{column} = ?" for column, _ in given], [value for _, value in given]


def default_db_path() -> Path:
    return Path(os.environ.get("SPECSCOPE_DB", DEFAULT_DB))


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class RunStore:
    """One DuckDB connection guarded by a lock: the worker's threads share it."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = duckdb.connect(str(self.path))
        self.migrate()
        with self._db.cursor() as reader:
            self._schemas = {
                table: reader.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema for table in TABLES
            }
        self.recovered = self._mark_interrupted_runs()

    # -- schema -------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply every migration newer than the file's version; return the version now."""
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMP)")
            current = self._db.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
            for version, sql in MIGRATIONS:
                if version > current:
                    self._db.execute("BEGIN TRANSACTION")
                    self._db.execute(sql)
                    self._db.execute("INSERT INTO schema_version VALUES (?, ?)", [version, now()])
                    self._db.execute("COMMIT")
                    current = version
            return current

    def schema_version(self) -> int:
        with self._lock:
            return self._db.execute("SELECT max(version) FROM schema_version").fetchone()[0]

    def _mark_interrupted_runs(self) -> int:
        with self._lock:
            rows = self._db.execute(
                "UPDATE runs SET status = 'incomplete', finished_at = ? WHERE status = 'running' RETURNING run_id",
                [now()],
            ).fetchall()
            return len(rows)

    # -- writing (the worker only) ------------------------------------------------------------

    def _insert(self, table: str, rows: Sequence[dict]) -> None:
        """Append rows (dicts; missing columns are NULL, other keys ignored) in one bulk insert."""
        batch = pa.Table.from_pylist(list(rows), schema=self._schemas[table])
        with self._lock:
            self._db.register("row_batch", batch)
            try:
                self._db.execute(f"INSERT INTO {table} SELECT * FROM row_batch")
            finally:
                self._db.unregister("row_batch")

    def start_run(self, run: dict) -> None:
        self._insert(
            "runs",
            [
                {
                    **run,
                    "status": "running",
                    "created_at": run.get("created_at") or now(),
                    "turns": json.dumps(list(run["turns"])),
                    "drafter_options": json.dumps(run.get("drafter_options") or {}),
                    "draft_len": str(run["draft_len"]),
                }
            ],
        )

    def add_steps(self, run_id: str, steps: Sequence[dict]) -> None:
        """Append step records (StepEvent dicts with a `turn`) in one bulk insert; a tree step also gets
        its depth, the draft positions the acceptance figures count for it."""
        if steps:
            rows = [{**step, "run_id": run_id, "step_index": step["index"]} for step in steps]
            for row in rows:
                row["tree_depth"] = tree_depth(row.get("parents"))
            self._insert("steps", rows)

    def fail_unfinished(self, run_ids: Sequence[str], message: str) -> None:
        """Mark those of these runs still running as failed, with the message."""
        if run_ids:
            with self._lock:
                self._db.execute(
                    f"UPDATE runs SET status = 'failed', error = ?, finished_at = ? WHERE status = 'running' "
                    f"AND run_id IN ({', '.join('?' for _ in run_ids)})",
                    [message, now(), *run_ids],
                )

    def finish_run(self, run_id: str, **fields) -> None:
        unknown = set(fields) - FINAL_FIELDS
        if unknown:
            raise ValueError(f"not a run result field: {sorted(unknown)}")
        fields.setdefault("finished_at", now())
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._lock:
            self._db.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*fields.values(), run_id])

    # -- reading ------------------------------------------------------------------------------

    def runs(
        self,
        target: str | None = None,
        drafter: str | None = None,
        draft_len: str | None = None,
        category: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
    ) -> pd.DataFrame:
        """Runs, newest first, filtered by equality on the given fields and a created_at range."""
        conditions, values = _equal_to(
            ("target", target),
            ("drafter", drafter),
            ("draft_len", draft_len),
            ("category", category),
            ("status", status),
            ("kind", kind),
        )
        if since is not None:
            conditions.append("created_at >= ?")
            values.append(since)
        if until is not None:
            conditions.append("created_at <= ?")
            values.append(until)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        with self._lock:
            return self._db.execute(
                f"SELECT * FROM runs {where} ORDER BY created_at DESC, lane LIMIT ?", [*values, limit]
            ).df()

    def run(self, run_id: str) -> dict | None:
        with self._lock:
            frame = self._db.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).df()
        return None if frame.empty else frame.iloc[0].to_dict()

    def steps(self, run_id: str) -> pd.DataFrame:
        with self._lock:
            return self._db.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY turn, step_index", [run_id]).df()

    def acceptance_tables(
        self,
        target: str | None = None,
        drafter: str | None = None,
        category: str | None = None,
        split: str | None = None,
        kinds: Sequence[str] | None = None,
        statuses: Sequence[str] = DEFAULT_STATUSES,
    ) -> dict[str, pd.DataFrame]:
        """Acceptance over every stored drafting step, grouped by (drafter, draft_len, category), computed
        in DuckDB: `runs` (accepted drafts, drafting steps and drafted tokens per run, for bootstrap CIs), `histogram`
        (steps by accepted count) and `positions` (per draft position: steps that reached it with every
        earlier draft accepted, and steps that accepted it). Runs without a category count as '(none)';
        `split` keeps one prompt-length split (short, medium, long: recorded for sweep runs); `kinds` and
        `statuses` keep runs of those kinds (default: every kind but replay and reference) and statuses.
        A sweep configuration with a variant (a temperature or drafter options it varied) is its own group,
        its drafter named 'ngram [ngram_max=2]', and so is a tree budget ('ngram [tree=16]', the variant
        of every run with one), whose draft positions are the tree's depths (a step that kept its path
        to depth k accepted positions 1..k) while `drafted` counts every node verified. Each row of `runs`
        also names its drafter without the variant (`base_drafter`) and its `tree_budget` (0: chains)."""
        conditions, values = _equal_to(
            ("r.target", target), ("r.drafter", drafter), ("r.category", category), ("r.split", split)
        )
        kinds = DEFAULT_KINDS if kinds is None else kinds
        conditions += [
            "len(st.drafted) > 0",
            f"r.status IN ({', '.join('?' for _ in statuses) or 'NULL'})",
            f"r.kind IN ({', '.join('?' for _ in kinds) or 'NULL'})",
        ]
        values += [*statuses, *kinds]
        drafting = f"""
            SELECT r.drafter || coalesce(' [' || r.variant || ']', '') AS drafter, r.draft_len,
                   coalesce(r.category, '(none)') AS category,
                   r.run_id, r.drafter AS base_drafter, coalesce(r.tree_budget, 0) AS tree_budget,
                   st.accepted, len(st.drafted) AS drafted, coalesce(st.tree_depth, len(st.drafted)) AS depth
            FROM steps st JOIN runs r USING (run_id) WHERE {" AND ".join(conditions)}"""
        queries = {
            "runs": f"""SELECT drafter, draft_len, category, run_id, base_drafter, tree_budget,
                               sum(accepted) AS accepted, count(*) AS steps, sum(drafted) AS drafted
                        FROM ({drafting}) GROUP BY ALL ORDER BY ALL""",
            "histogram": f"""SELECT drafter, draft_len, category, accepted, count(*) AS steps
                             FROM ({drafting}) GROUP BY ALL ORDER BY ALL""",
            "positions": f"""SELECT drafter, draft_len, category, position,
                                    count(*) FILTER (WHERE accepted >= position - 1) AS reached,
                                    count(*) FILTER (WHERE accepted >= position) AS accepted
                             FROM ({drafting}), unnest(range(1, depth + 1)) AS p(position)
                             GROUP BY ALL ORDER BY ALL""",
        }
        with self._lock:
            return {name: self._db.execute(sql, values).df() for name, sql in queries.items()}

    # -- sweeps --------------------------------------------------------------------------------

    def start_sweep(
        self,
        sweep_id: str,
        target: str,
        fingerprint: str | None,
        device: str,
        settings: dict,
        engine: dict | None = None,
    ) -> None:
        """A new sweep, `running`; `engine` ({engine, engine_version, engine_config}) for one measured on a
        serving engine (NULL for SpecScope's own)."""
        engine = engine or {}
        with self._lock:
            self._db.execute(
                "INSERT INTO sweeps (sweep_id, created_at, status, target, target_fingerprint, device, settings, "
                "engine, engine_version, engine_config) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                [
                    sweep_id,
                    now(),
                    target,
                    fingerprint,
                    device,
                    json.dumps(settings),
                    engine.get("engine"),
                    engine.get("engine_version"),
                    json.dumps(engine.get("engine_config")) if engine.get("engine_config") is not None else None,
                ],
            )

    def add_sweep_points(self, sweep_id: str, points: Sequence[dict]) -> None:
        self._insert(
            "sweep_points", [{**point, "sweep_id": sweep_id, "draft_len": str(point["draft_len"])} for point in points]
        )

    def has_sweep(self, sweep_id: str) -> bool:
        with self._lock:
            return bool(self._db.execute("SELECT 1 FROM sweeps WHERE sweep_id = ?", [sweep_id]).fetchall())

    def measured_configs(self, sweep_id: str) -> set[tuple[str, str, int]]:
        """The (drafter, draft_len, batch_size) a sweep has measured, failed points left out: what a resumed
        sweep skips."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT drafter, draft_len, batch_size FROM sweep_points "
                "WHERE sweep_id = ? AND status IS DISTINCT FROM 'failed'",
                [sweep_id],
            ).fetchall()
        return {(drafter, draft_len, batch_size) for drafter, draft_len, batch_size in rows}

    def sweep(self, sweep_id: str) -> dict:
        """One stored sweep's row; a clear error for an unknown id."""
        with self._lock:
            found = self._db.execute("SELECT * FROM sweeps WHERE sweep_id = ?", [sweep_id]).df()
        if found.empty:
            raise SpecScopeError(f"no sweep {sweep_id} in {self.path}")
        return found.to_dict(orient="records")[0]

    def resume_sweep(self, sweep_id: str) -> None:
        """Reopen a stored sweep: its failed points go (the resumed sweep measures them again), it is
        `running` again."""
        with self._lock:
            self._db.execute("DELETE FROM sweep_points WHERE sweep_id = ? AND status = 'failed'", [sweep_id])
            self._db.execute("UPDATE sweeps SET status = 'running', finished_at = NULL WHERE sweep_id = ?", [sweep_id])

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE sweeps SET status = ?, finished_at = ? WHERE sweep_id = ?", [status, now(), sweep_id]
            )

    def sweeps(self) -> pd.DataFrame:
        with self._lock:
            return self._db.execute("SELECT * FROM sweeps ORDER BY created_at DESC").df()

    def sweep_points(
        self, sweep_id: str | None = None, target: str | None = None, reference: bool | None = None
    ) -> pd.DataFrame:
        """Points of one sweep, or of every sweep of a target (newest first; a cancelled sweep keeps the
        points of the configurations it finished), with the sweep's `reference` label (NULL for the
        user's own); reference=True keeps only reference points, False only the user's."""
        conditions, values = _equal_to(("p.sweep_id", sweep_id), ("s.target", target))
        if reference is not None:
            conditions.append(f"s.reference IS {'NOT ' if reference else ''}NULL")
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        with self._lock:
            return self._db.execute(
                f"SELECT p.*, s.target, s.created_at, s.reference, s.engine, s.engine_version, s.device "
                "FROM sweep_points p JOIN sweeps s USING (sweep_id) "
                f"{where} "
                "ORDER BY s.created_at DESC, p.drafter, p.draft_len, p.batch_size",
                values,
            ).df()

    @contextlib.contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, held under the lock, for bulk copies in and out (reference.py)."""
        with self._lock:
            yield self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()
