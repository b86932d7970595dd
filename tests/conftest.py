"""Shared fixtures: tiny random models for fast tests, the real embedded default for the slow set."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.tiny import tiny_llama

# `make test` runs one test process per core (pytest-xdist): each then keeps to its share of the cores, and so
# do the workers and commands its tests start, since threads beyond the cores only spin waiting for each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
# Inductor compiles in this process and in those its tests start, not in a pool of compile processes: on two
# cores the pool's start costs about 50 s per compiling process while its parallel C++ builds save a few (a
# tiny target's two graphs in a new process: 11 s against 62 from inductor's on-disk cache, 66 s against 61
# with nothing cached).
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
# What `make test-fast` leaves out is marked slow: by hand, the tests that load the real default model, compile the
# target's graphs or run a command as a process; here, every test whose fixtures start a worker process or load the
# real model (fixtures are looked up by name, including those a test's fixtures use).
PROCESS_FIXTURES = frozenset(
    {
        "default_model",  # the real model
        "page_worker",  # the page tests' worker (worker_env, swept_env)
        "e2e_worker",  # the browser tests' worker (dashboard, browser_page)
        "worker",  # the serving tests' workers
        "fuzzed_worker",
        "hint_worker",
        "tree_worker",
        "chain_worker",
        "carded_worker",
        "engine_env",
        "first_start",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


# Workers and CLI runs started by tests take the eager path unless a test asks for `--compile on`:
# compiling costs tens of seconds per model, so the compiled path is tested on a focused set.
os.environ["SPECSCOPE_COMPILE"] = "off"
# Compiled passes run on torch.compile's graphs unless a test asks for ahead-of-time packages
# (test_aot_packages.py): building a model's packages costs ~50 s.
os.environ["SPECSCOPE_PACKAGED_GRAPHS"] = "off"
# Workers started by tests import no reference sweep unless a test gives one (`--reference FOLDER`):
# the shipped reference would otherwise join every test worker's store.
os.environ["SPECSCOPE_REFERENCE"] = "off"


@pytest.fixture(scope="session")
def tiny():
    return tiny_llama(seed=0)


@pytest.fixture(scope="session")
def tiny_folder(tiny, tmp_path_factory) -> str:
    """The tiny model saved as a Hugging Face folder: a target a worker process can load."""
    from tests.helpers.tiny import save_tiny

    return str(save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny"))


@pytest.fixture(scope="session")
def tiny_other():
    """A different random model with the same tokenizer: a weak external draft."""
    return tiny_llama(seed=1, layers=2)


@pytest.fixture(scope="session")
def pair():
    """A 12-token target and draft whose exact joint distribution the sampling tests enumerate."""
    from tests.helpers.sampling import sampling_model

    target, draft = sampling_model(seed=3, layers=2), sampling_model(seed=4, layers=1)
    return target, draft


@pytest.fixture(scope="session")
def default_model():
    from backend.core.models import load_model

    return load_model("default")
