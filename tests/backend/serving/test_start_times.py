"""`bench start`'s sequence: an uncompiled start, then a first and a later compiled start on one new
inductor cache folder (shared by the two, removed after), each worker stopped before the next starts.
(What a start costs is a benchmark: docs/measurements/bench_start_cpu.txt.)"""

from __future__ import annotations

from pathlib import Path

from backend.serving import bench_worker


class FakeWorker:
    def __init__(self, running: list) -> None:
        self.running = running
        running.append(self)

    def terminate(self) -> None:
        self.running.remove(self)

    def wait(self, timeout: float) -> int:
        return 0


def test_the_compiled_starts_share_one_new_inductor_cache_and_each_worker_stops_first(monkeypatch):
    starts, running = [], []

    def start_worker(target: str, device: str, compile: str, env: dict[str, str], loading: list[str] | None):
        assert not running, "the previous worker still runs"
        assert loading == ["--dtype", "float32"]  # every start loads the same way
        folder = Path(env["TORCHINDUCTOR_CACHE_DIR"])
        starts.append((target, device, compile, folder, folder.is_dir() and not any(folder.iterdir())))
        return FakeWorker(running), "http://127.0.0.1:1"

    monkeypatch.setattr(bench_worker, "start_worker", start_worker)
    times = bench_worker.start_times("tiny", "cpu", "float32")
    assert [(row["compile"], row["start"]) for row in times] == [("off", "first"), ("on", "first"), ("on", "later")]
    assert [start[:3] for start in starts] == [("tiny", "cpu", "off"), ("tiny", "cpu", "on"), ("tiny", "cpu", "on")]
    assert len({start[3] for start in starts}) == 1 and all(start[4] for start in starts)  # one new, empty folder
    assert not starts[0][3].exists() and not running
