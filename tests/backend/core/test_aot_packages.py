"""The fast path's ahead-of-time packages (aot_packages.py) on a tiny random Llama: built once, then
loaded by a later FastForward without building; the packaged engine's greedy output equals the eager
engine's for plain decoding and for drafters (chains and a tree); a package whose weights, config or
settings differ has another name; a broken package is refused and the pass runs on torch.compile; a
failed or interrupted build (a child process) is named or stopped and leaves nothing behind, and a killed
worker's builds die with it. Building both packages costs ~60 s, paid once for this module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from backend.core.aot_packages import SWITCH, PackagedGraphs
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.fast_forward import FastForward
from backend.core.target_passes import single_sequence_graphs
from tests.helpers.drafters import registered_drafter
from tests.helpers.scripted import PROMPT
from tests.helpers.tiny import tiny_llama

pytestmark = pytest.mark.slow  # compiles the target's graphs: `make test-fast` leaves it out


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """A tiny target whose compiled passes run on packages built into a folder of this module's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SWITCH, "on")
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
        model = tiny_llama(seed=7)
        first = FastForward(model.model, compiled=True)
        superseded = first.packages.path(1).with_name(first.packages.path(1).name[:-3] + "0ld")
        another_model = first.packages.folder / "one-token-0123456789ab-0ld"
        for older in (superseded, another_model):
            older.mkdir(parents=True)
            (older / "model.so").write_bytes(b"an older build")
        for width in (1, 3):  # the first pass builds both packages side by side, the second loads one
            first.forward(torch.tensor([PROMPT[:width]]), first.new_cache(64))
        assert not superseded.exists() and another_model.exists()  # replaced by the new build / kept
        yield model, first


def test_packages_are_built_once_and_loaded_by_a_later_start(packaged):
    model, first = packaged
    assert first.packages is not None and first.packages.failure is None
    assert len(first.packages.built) == 2 and all(first.packages.path(kind).exists() for kind in (1, 2))
    later = FastForward(model.model, compiled=True)
    for width in (1, 4):
        ours, theirs = later.new_cache(64), later.new_cache(64)
        got = later.forward(torch.tensor([PROMPT[:width]]), ours)
        want = FastForward(model.model, compiled=False).forward(torch.tensor([PROMPT[:width]]), theirs)
        torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(ours.keys[-1], theirs.keys[-1], atol=2e-5, rtol=1e-4)  # written in place
    assert later.packages.built == [] and later.packages.failure is None  # loaded, not built


@pytest.mark.parametrize(
    "name,draft_len,tree_budget",
    [(None, 0, 0), ("ngram", 3, 0), ("ngram", 4, 8), ("eagle3", 5, 0), ("eagle3", "auto", 0)],
)
def test_the_packaged_engine_is_lossless(packaged, name, draft_len, tree_budget):
    model, _ = packaged
    other = tiny_llama(seed=1, layers=2)

    def generate(compile: str):
        engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context, compile)
        drafter = registered_drafter(name, model, other) if name else None
        return engine.generate(
            PROMPT, drafter, GenerationSettings(40, draft_len=draft_len, tree_budget=tree_budget)
        ).run()

    assert generate("on").output_ids == generate("off").output_ids
    assert single_sequence_graphs(model.model) == "packages"  # the prompt went through the verify package


def test_a_package_is_named_by_everything_it_froze_in(packaged):
    model, first = packaged
    changed = tiny_llama(seed=7)
    with torch.no_grad():
        changed.model.model.norm.weight.mul_(2)  # not a linear weight: frozen into the package all the same
    assert FastForward(changed.model, compiled=True).packages.path(1) != first.packages.path(1)
    other_config = tiny_llama(seed=7)
    other_config.model.config.rms_norm_eps *= 10  # equal tensors, another graph
    assert FastForward(other_config.model, compiled=True).packages.path(1) != first.packages.path(1)
    assert first.packages.path(1) != first.packages.path(2)  # other settings


def test_a_broken_package_is_refused_and_torch_compile_takes_over(packaged, tmp_path):
    model, first = packaged
    broken = PackagedGraphs(
        first.module, first.new_cache, first.packages.identity, first.packages.settings, 65, tmp_path
    )
    broken.path(1).mkdir()
    (broken.path(1) / "model.so").write_bytes(b"not a package")
    assert broken.runner(1) is None
    assert broken.failure and broken.failure.startswith(broken.path(1).name)


def test_a_failed_build_is_named_and_torch_compile_takes_over(packaged, tmp_path):
    _, first = packaged
    wrong = {kind: {"no_such_inductor_option": True} for kind in (1, 2)}
    failing = PackagedGraphs(first.module, first.new_cache, first.packages.identity, wrong, 65, tmp_path)
    failing.path(2).mkdir()  # present: only the one-token package is built
    abandoned, running = tmp_path / "building-killed", tmp_path / "building-now"  # another build's scratch
    for scratch, age in ((abandoned, 7200), (running, 60)):
        scratch.mkdir()
        os.utime(scratch, (time.time() - age, time.time() - age))
    assert failing.runner(1) is None  # its build process failed
    assert failing.failure.startswith(failing.path(1).name) and "no_such_inductor_option" in failing.failure
    assert failing.built == [] and sorted(tmp_path.iterdir()) == [running, failing.path(2)]  # nothing left


def test_an_interrupted_build_stops_its_child_and_leaves_nothing(packaged, tmp_path, monkeypatch):
    _, first = packaged
    settings = first.packages.settings
    graphs = PackagedGraphs(first.module, first.new_cache, first.packages.identity, settings, 65, tmp_path)
    graphs.path(2).mkdir()  # present: only the one-token package is built
    children = []
    start = PackagedGraphs._start_build

    def remembered(self, kind, work):
        children.append(start(self, kind, work))
        return children[-1]

    def interrupted(self, kind, work, child):
        raise KeyboardInterrupt

    monkeypatch.setattr(PackagedGraphs, "_start_build", remembered)
    monkeypatch.setattr(PackagedGraphs, "_finish_build", interrupted)
    with pytest.raises(KeyboardInterrupt):
        graphs.runner(1)
    assert children[0].returncode is not None  # stopped, not left compiling
    assert list(tmp_path.iterdir()) == [graphs.path(2)]


KILLED_WORKER = """
import sys
from pathlib import Path
from backend.core.aot_packages import PackagedGraphs
from backend.core.fast_forward import FastForward
from tests.helpers.tiny import tiny_llama
fast = FastForward(tiny_llama(seed=7).model, compiled=False)
PackagedGraphs(fast.module, fast.new_cache, "killed", {1: {}, 2: {}}, 65, Path(sys.argv[1])).runner(1)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_killed_worker_takes_its_package_builds_with_it(tmp_path):
    root = Path(__file__).resolve().parents[3]
    worker = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, str(tmp_path)], cwd=root)
    try:
        builds = _wait_for(lambda: _children_of(worker.pid), 120)  # exported, then handed to child processes
    finally:
        worker.kill()
        worker.wait()
    assert builds and _wait_for(lambda: not any(_alive(pid) for pid in builds), 20)


def _children_of(parent: int) -> list[int]:
    stats = {int(path.parent.name): _stat(path) for path in Path("/proc").glob("[0-9]*/stat")}
    return [pid for pid, fields in stats.items() if fields and fields[1] == str(parent)]


def _alive(pid: int) -> bool:
    fields = _stat(Path(f"/proc/{pid}/stat"))
    return bool(fields) and fields[0] != "Z"  # a zombie has exited


def _stat(path: Path) -> list[str]:
    """A process's state, parent and the rest (after its name, which may hold spaces); [] once gone."""
    try:
        return path.read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return []


def _wait_for(condition, seconds: float):
    deadline = time.monotonic() + seconds
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def test_only_single_sequence_passes_over_dense_caches_of_exported_capacities_take_packages(packaged):
    _, first = packaged
    assert first.packages.fits(1, first.new_cache(300))
    assert not first.packages.fits(2, first.new_cache(300, batch=2))  # batches stay on torch.compile
    assert not first.packages.fits(1, first.new_cache(128 * 513))


def test_the_first_batch_graphs_serve_every_later_batch_size(packaged):
    """With packages serving single sequences, the first batch graphs are compiled at some batch size
    with the cache's batch dimension symbolic: a later batch size reuses them, not a recompilation (a
    minute per graph on the default model, paid inside the first timed configuration of a sweep)."""
    model, first = packaged
    eager = FastForward(model.model, compiled=False)

    def batched_pass(batch: int, width: int) -> None:
        ids = torch.tensor(
            [[PROMPT[(row + step) % len(PROMPT)] for step in range(width)] for row in range(batch)]
        )  # [B, T]
        got = first.forward(ids, first.new_cache(64, batch=batch)).logits
        want = eager.forward(ids, eager.new_cache(64, batch=batch)).logits
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)

    for width in (1, 3):
        batched_pass(2, width)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch, width in ((4, 1), (4, 3), (3, 5), (16, 1)):
        batched_pass(batch, width)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def test_a_bf16_target_keeps_one_package_that_serves_its_one_token_passes_too(tmp_path, monkeypatch):
    """In bf16 one-token passes run through the verify graph (so every row rounds alike): one package,
    checked at load against what it computed where it was built, and lossless drafting on it."""
    monkeypatch.setenv(SWITCH, "on")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    model = tiny_llama(seed=7)
    model.model.to(torch.bfloat16)
    first = FastForward(model.model, compiled=True)
    assert sorted(first.packages.settings) == [2]
    first.forward(torch.tensor([PROMPT[:3]]), first.new_cache(64))
    assert first.packages.built == [first.packages.path(2).name] and (first.packages.path(2) / "expected.pt").exists()
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context, "on")
    plain = engine.generate(PROMPT, None, GenerationSettings(30, draft_len=0)).run()
    drafted = engine.generate(PROMPT, registered_drafter("ngram", model, model), GenerationSettings(30, draft_len=4))
    assert drafted.run().output_ids == plain.output_ids
    assert single_sequence_graphs(model.model) == "packages" and engine.passes.fast.packages.built == []
