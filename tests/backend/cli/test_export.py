"""`python -m backend export eagle3`: the folder it writes, the serve command it prints, its one-line errors."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from safetensors.torch import load_file

from backend.cli.main import main
from backend.core.models import load_model
from backend.drafters import eagle3
from tests.helpers.cli import run_main
from tests.helpers.tiny import save_tiny
from tests.helpers.trained import reduced_d2t


@pytest.fixture(scope="module")
def tiny_with_head(tiny, tmp_path_factory) -> tuple[str, str]:
    """A tiny target folder and an EAGLE-3 head saved for it."""
    folder = save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny")
    target = load_model(str(folder), device="cpu", dtype="float32", compile="off")
    head_folder = tmp_path_factory.mktemp("drafters") / "eagle3-tiny"
    eagle3.save(eagle3.new_head(target, d2t=reduced_d2t()), target, head_folder)
    return str(folder), str(head_folder)


def test_export_vllm_writes_the_checkpoint_and_prints_vllms_serve_command(tiny_with_head, tmp_path, capsys):
    target, head = tiny_with_head
    out = tmp_path / "eagle3 vllm"  # a space: the printed command must quote it
    args = ["export", "eagle3", "--target", target, "--drafter-path", head, "--out", str(out), "--format", "vllm"]
    assert main([*args, "--draft-len", "3"]) == 0
    command = shlex.split(capsys.readouterr().out.strip())
    assert command[:3] == ["vllm", "serve", target] and command[3] == "--speculative-config"
    assert json.loads(command[4]) == {"method": "eagle3", "model": str(out), "num_speculative_tokens": 3}
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert len(load_file(str(out / "model.safetensors"))["d2t"]) == 13


def test_export_sglang_prints_sglangs_launch_command(tiny_with_head, tmp_path, capsys):
    target, head = tiny_with_head
    out = tmp_path / "eagle3-sglang"
    assert (
        main(["export", "eagle3", "--target", target, "--drafter-path", head, "--out", str(out), "--format", "sglang"])
        == 0
    )
    command = shlex.split(capsys.readouterr().out.strip())
    assert command[:4] == ["python", "-m", "sglang.launch_server", "--model-path"] and command[4] == target
    options = dict(zip(command[5::2], command[6::2], strict=True))
    assert options == {
        "--speculative-algorithm": "EAGLE3",
        "--speculative-draft-model-path": str(out),
        "--speculative-num-steps": "4",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "5",
    }
    assert json.loads((out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        0,
        1,
        2,
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--draft-len", "0"], "--draft-len must be at least 1, got 0"),
        (["--drafter-path", "/nonexistent/eagle3"], "no trained eagle3 drafter at /nonexistent/eagle3"),
        ([], "no trained eagle3 drafter for"),  # a tiny target has no shipped head
    ],
)
def test_bad_input_is_one_clear_line(tiny_with_head, tmp_path, capsys, extra, message):
    target, _ = tiny_with_head
    ran = run_main(
        ["export", "eagle3", "--target", target, "--out", str(tmp_path / "x"), "--format", "vllm", *extra], capsys
    )
    error = ran.stderr.strip().splitlines()
    assert ran.status == 2 and len(error) == 1 and error[0].startswith("error: ") and message in error[0]
    assert not (tmp_path / "x").exists()


def test_an_out_that_holds_files_is_refused_and_left_as_it_was(tiny_with_head, tmp_path, capsys):
    """The drafter's own folder or a file as --out: nothing is overwritten (a trained drafter's weights stay)."""
    target, head = tiny_with_head
    before = {path.name: path.read_bytes() for path in Path(head).iterdir()}
    note = tmp_path / "notes.txt"
    note.write_text("mine")
    args = ["export", "eagle3", "--target", target, "--drafter-path", head, "--format", "vllm"]
    for out in (head, str(note)):
        ran = run_main([*args, "--out", out], capsys)
        assert ran.status == 2 and "already exists and is not an empty folder" in ran.last_error
    ran = run_main([*args, "--out", "/proc/specscope/out"], capsys)
    assert ran.status == 2 and ran.last_error.startswith("error: cannot create the folder /proc/specscope/out")
    assert {path.name: path.read_bytes() for path in Path(head).iterdir()} == before and note.read_text() == "mine"


@pytest.mark.slow
def test_export_finds_the_shipped_head_of_the_default(tmp_path, capsys):
    out = tmp_path / "eagle3"
    assert main(["export", "eagle3", "--out", str(out), "--format", "vllm"]) == 0
    captured = capsys.readouterr()
    assert "data/drafters/eagle3-smollm2" in captured.err
    assert captured.out.startswith("vllm serve ") and '"method": "eagle3"' in captured.out
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 6144
