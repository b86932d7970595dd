"""The worker benchmarks load the target the way a user asked: `bench stream` and `bench start` take the
load flags every command takes (--dtype, --allow-remote-code), hand them to the in-process model and to
the worker they launch, and the launched command is one the worker's own parser reads back to them."""

from __future__ import annotations

import pytest

from backend.cli import main as cli_main
from backend.cli.main import build_parser, main
from backend.lab.prompts import DEFAULT_SUITE
from backend.serving import bench_worker


def test_the_launched_worker_command_reads_back_to_the_load_flags(monkeypatch):
    launched: list[list[str]] = []

    class ExitedWorker:
        def __init__(self, command: list[str], **_: object) -> None:
            launched.append(command)

        def poll(self) -> int:
            return 1

    monkeypatch.setattr(bench_worker.subprocess, "Popen", ExitedWorker)
    with pytest.raises(RuntimeError, match="exited while starting"):
        bench_worker.start_worker("tiny", "cpu", "off", loading=bench_worker.load_flags("bfloat16", True))
    args = build_parser().parse_args(launched[0][3:])  # after `python -m backend`
    assert args.handler is cli_main._worker
    assert (args.default_target, args.device, args.compile) == ("tiny", "cpu", "off")
    assert (args.dtype, args.allow_remote_code) == ("bfloat16", True)
    assert bench_worker.load_flags() == ["--dtype", "auto"]  # remote code stays off unless asked for


@pytest.mark.parametrize("remote", [False, True])
def test_bench_stream_loads_both_sides_with_the_flags_given(monkeypatch, capsys, remote):
    seen = {}

    def stream_benchmark(target, questions, drafter, draft_len, max_new_tokens, repeats, *loading):
        seen.update(target=target, questions=len(questions), loading=loading)
        memory = {"rss_mb": 1.0, "peak_rss_mb": 2.0}
        return {
            "rows": [],
            "geomean_worker_over_in_process": 1.0,
            "median_first_step_s": 0.1,
            "worker_memory_after_runs_mb": memory,
            "all_outputs_equal": True,
        }

    monkeypatch.setattr(bench_worker, "stream_benchmark", stream_benchmark)
    argv = ["bench", "stream", "--suite", str(DEFAULT_SUITE), "--target", "tiny", "--device", "cpu"]
    argv += ["--dtype", "float16", "--compile", "off", *(["--allow-remote-code"] if remote else [])]
    assert main(argv) == 0
    assert seen == {"target": "tiny", "questions": 9, "loading": ("cpu", "off", "float16", remote)}
    assert "worker stream / in process = 1.000" in capsys.readouterr().out


def test_bench_start_launches_each_worker_with_the_flags_given(monkeypatch):
    seen = {}

    def start_times(target, device, *loading):
        seen.update(target=target, device=device, loading=loading)
        return []

    monkeypatch.setattr(bench_worker, "start_times", start_times)
    assert main(["bench", "start", "--target", "tiny", "--device", "cpu", "--dtype", "bfloat16"]) == 0
    assert seen == {"target": "tiny", "device": "cpu", "loading": ("bfloat16", False)}
