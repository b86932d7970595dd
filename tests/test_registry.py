"""The drafter registry is the one source of every surface: CLI flags, the worker's request model and
`/models`, the dashboard's drafter list (tests/pages/test_registry_surfaces.py) and the losslessness
tests (tests/helpers/drafters.py). The last test adds the README's example drafter to a copy of the tree, one
file and one registry line, and runs those surfaces' tests on it there."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli.main import build_parser
from backend.drafters import DRAFTER_NAMES, REGISTRY, DrafterOptions, all_options, build_drafter, options_for
from backend.serving.bodies import DrafterFields

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "bigram.py"


def generate_help() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    return " ".join(out.getvalue().split())


def test_every_drafter_and_option_is_on_the_command_line():
    text = generate_help()
    assert f"one of {', '.join(DRAFTER_NAMES)}" in text
    for info in all_options():
        assert info.flag in text and info.help.split()[0] in text


def test_command_line_options_reach_the_drafter_and_bounds_are_checked(capsys):
    args = build_parser().parse_args(["generate", "--prompt", "x", "--drafter", "ngram", "--ngram-max", "3"])
    from backend.cli.common import drafter_options

    assert options_for("ngram", drafter_options(args)).ngram_max == 3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "x", "--ngram-max", "99"])
    assert "ngram_max must be >= 1 and <= 16, got 99" in capsys.readouterr().err


def test_the_worker_request_model_has_every_option_with_its_bounds():
    fields = DrafterFields.model_fields
    for info in all_options():
        assert fields[info.name].default == info.default and fields[info.name].description == info.help
    assert DrafterFields(ngram_min=2).lane().options == DrafterOptions(ngram_min=2)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        DrafterFields(ngram_min=0)


def test_each_drafter_builds_from_its_own_options_only(tiny):
    options = DrafterOptions(suffix_max_depth=8, ngram_max=2)
    assert options_for("suffix", options).suffix_max_depth == 8
    assert build_drafter("ngram", tiny, options).max_n == 2
    assert build_drafter("none", tiny, options) is None
    for spec in REGISTRY.values():
        assert spec.summary and (spec.untrained is not None) == spec.trained  # tests need fresh trained heads


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.duckdb*")
    for name in ("backend", "ui", "pages", "tests"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copytree(ROOT / "data" / "prompts", dest / "data" / "prompts")
    for name in ("app.py", "pyproject.toml"):
        shutil.copy(ROOT / name, dest / name)


@pytest.mark.slow
@pytest.mark.slow
def test_adding_a_drafter_is_one_file_and_one_registry_line(tmp_path):
    _copy_tree(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / "backend" / "drafters" / "bigram.py")  # the one file
    registry = tmp_path / "backend" / "drafters" / "__init__.py"
    text = registry.read_text()
    assert text.count('    "dspark",\n') == 1
    registry.write_text(text.replace('    "dspark",\n', '    "dspark",\n    "bigram",\n'))  # the one line

    tests = [
        "tests/test_registry.py",
        "tests/pages/test_registry_surfaces.py",
        "tests/backend/core/test_engine.py",
        "tests/backend/core/test_batch.py",
        "tests/backend/core/test_sampling.py",
    ]
    chosen = "(bigram or every_drafter_and_option or surfaces) and not compiled and not one_file"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, "-k", chosen],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary and "skipped" not in summary
    # the greedy (single and batched) and sampling losslessness tests ran for the new drafter
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *tests[2:], "-k", "bigram"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "test_engine.py::test_greedy_output_equals_target_greedy_for_every_drafter" in listed
    assert "test_batch.py::test_every_row_equals_its_single_sequence_output" in listed
    assert "test_sampling.py::test_every_registered_drafter_samples_from_the_target" in listed
