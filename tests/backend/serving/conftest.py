"""A worker process serving the tiny model on a fresh store, for the worker tests of a module (a module
that needs another, such as one with a reference to import, defines its own `worker`)."""

from __future__ import annotations

import pytest

from tests.helpers.workers import WorkerProcess


@pytest.fixture(scope="module")
def worker(tiny_folder, tmp_path_factory):
    process = WorkerProcess(tmp_path_factory.mktemp("db") / "runs.duckdb", tiny_folder)
    process.wait_ready()
    yield process
    process.stop()
