"""The import contract (pyproject's [tool.importlinter]): backend's layers, and a dashboard that never
imports torch or transformers. The second test breaks the contract on purpose in a copy of the tree
to show the check can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_import_contract_holds():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _copy_tree(dest: Path) -> None:
    for name in ("backend", "ui", "pages"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def test_a_page_importing_torch_breaks_the_contract(tmp_path):
    _copy_tree(tmp_path)
    page = tmp_path / "pages" / "history.py"
    page.write_text("import torch\n" + page.read_text())
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "the dashboard never imports torch" in result.stdout and "BROKEN" in result.stdout


def test_core_importing_the_worker_breaks_the_layers(tmp_path):
    _copy_tree(tmp_path)
    verify = tmp_path / "backend" / "core" / "verify.py"
    verify.write_text(verify.read_text() + "\nfrom backend.serving import worker  # noqa\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "backend is layered" in result.stdout and "BROKEN" in result.stdout
