"""The fast path's ahead-of-time packages (aot_packages.py) on a tiny random Llama: built once, then
loaded by a later FastForward without building; the packaged engine's greedy output equals the eager
engine's for plain decoding and for drafters (chains and a tree); a package whose weights, config or
settings differ has another name; a broken package is refused and the pass runs on torch.compile; a
failed or interrupted build (a child process) is named or stopped and leaves nothing behind. Building both
packages costs ~60 s, paid once for this module."""

from __future__ import annotations

import pytest
import torch

from backend.core.aot_packages import SWITCH, PackagedGraphs
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.fast_forward import FastForward
from backend.core.target_passes import single_sequence_graphs
from tests.helpers.drafters import registered_drafter
from tests.helpers.scripted import PROMPT
from tests.helpers.tiny import tiny_llama


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
    assert failing.runner(1) is None  # its build process failed
    assert failing.failure.startswith(failing.path(1).name) and "no_such_inductor_option" in failing.failure
    assert failing.built == [] and list(tmp_path.iterdir()) == [failing.path(2)]  # nothing half-built left


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


def test_only_single_sequence_passes_over_dense_caches_of_exported_capacities_take_packages(packaged):
    _, first = packaged
    assert first.packages.fits(1, first.new_cache(300))
    assert not first.packages.fits(2, first.new_cache(300, batch=2))  # batches stay on torch.compile
    assert not first.packages.fits(1, first.new_cache(128 * 513))
