"""Every command line a page suggests works when pasted as written: each is run, as a shell would
run it, in the checkout against a running worker that nothing points the command at (no
SPECSCOPE_WORKER_URL; the worker published its URL beside the store the command would use), and
must end well with its results stored by that worker."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys

import httpx
import pytest

from backend.lab.hints import HINTS, SWEEP_HINT
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import ROOT, WorkerProcess

COMMAND = re.compile(r"`(python -m backend [^`]+)`")


def page_commands() -> set[str]:
    """The backticked `python -m backend ...` commands in the pages' string literals."""
    found = set()
    for path in sorted((ROOT / "pages").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.update(COMMAND.findall(node.value))
    return found


@pytest.fixture(scope="module")
def hint_worker(tiny, tmp_path_factory):
    folder = save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny")
    worker = WorkerProcess(tmp_path_factory.mktemp("home") / "specscope.duckdb", str(folder))
    worker.wait_ready()
    yield worker
    worker.stop()


def test_the_analysis_pages_show_the_shared_hints():
    for page in ("pareto.py", "acceptance.py"):
        assert "SWEEP_HINT" in (ROOT / "pages" / page).read_text()
    assert SWEEP_HINT in HINTS


@pytest.mark.parametrize("command", sorted(set(HINTS) | page_commands()))
def test_a_hint_works_pasted_as_written(command, hint_worker):
    argv = shlex.split(command)
    assert argv[0] == "python"
    env = {key: value for key, value in os.environ.items() if key != "SPECSCOPE_WORKER_URL"}
    env["SPECSCOPE_DB"] = str(hint_worker.db)  # where the store lives; the command is told nothing else
    before = len(httpx.get(hint_worker.url + "/sweeps").json())
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"stored by the worker at {hint_worker.url}" in done.stderr
    sweeps = httpx.get(hint_worker.url + "/sweeps").json()
    assert len(sweeps) == before + 1 and sweeps[0]["status"] == "complete"
