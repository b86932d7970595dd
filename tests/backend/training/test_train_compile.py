"""`train` builds the target's compiled passes only where they serve: the generate teacher's answers on a CPU.
With the prefill teacher or a filled cache (`--distil-minutes 0`) nothing is generated, so the target loads
with its eager forward and no minutes go to compiling."""

from __future__ import annotations

import pytest
import torch

from backend.cli.main import build_parser
from backend.training.run import train_command


class _Loaded(Exception):
    """Stops train_command once the target would load: only the choice it was loaded with matters here."""


@pytest.mark.parametrize(
    ("more", "compile"),
    [
        ([], "on"),
        (["--teacher", "mix"], "on"),
        (["--teacher", "prefill"], "off"),
        (["--distil-minutes", "0"], "off"),
        (["--device", "cuda"], "off"),
        (["--device", "auto"], "off"),
    ],
)
def test_train_compiles_the_target_only_where_it_generates_answers_on_a_cpu(tmp_path, monkeypatch, more, compile):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU here: --device auto or cuda picks it
    args = build_parser().parse_args(
        ["train", "--kind", "eagle3", "--out", str(tmp_path), "--device", "cpu", "--compile", "on", *more]
    )
    seen: list[str] = []

    def load_target(loaded):
        seen.append(loaded.compile)
        raise _Loaded

    with pytest.raises(_Loaded):
        train_command(args, load_target)
    assert seen == [compile]
    assert args.compile == "on"  # the run's own arguments (the card's command) are left as given
