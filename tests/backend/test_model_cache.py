"""The worker's model cache: least recently used out over the budget, drafters kept per target,
and nothing blocks on a model that is still loading."""

from __future__ import annotations

import threading
import time

from backend.drafters import DrafterOptions
from backend.serving.model_cache import ModelCache, model_bytes
from tests.tiny import tiny_llama


def loader_of(models: dict, delay: float = 0.0):
    def load(spec, **_):
        time.sleep(delay)
        return models[spec]
    return load


def test_least_recently_used_is_evicted_over_the_budget():
    models = {name: tiny_llama(seed=i) for i, name in enumerate("abc")}
    cache = ModelCache(budget_bytes=2 * model_bytes(models["a"]), loader=loader_of(models))
    cache.get("a")
    cache.get("b")
    cache.get("a")  # a is now the most recently used
    cache.get("c")
    assert cache.loaded() == ["a", "c"]


def test_drafters_persist_per_target_and_go_with_it():
    models = {name: tiny_llama(seed=i) for i, name in enumerate("ab")}
    cache = ModelCache(budget_bytes=model_bytes(models["a"]), loader=loader_of(models))
    suffix = cache.drafter("a", "suffix", DrafterOptions())
    assert cache.drafter("a", "suffix", DrafterOptions()) is suffix  # the global suffix tree lives on
    assert cache.drafter("a", "suffix", DrafterOptions(suffix_max_depth=8)) is not suffix
    cache.get("b")  # evicts a, and the drafters built on it
    assert cache.loaded() == ["b"]
    assert cache.drafter("a", "suffix", DrafterOptions()) is not suffix


def test_status_questions_do_not_wait_for_a_load():
    models = {"slow": tiny_llama(seed=0)}
    cache = ModelCache(budget_bytes=10**9, loader=loader_of(models, delay=1.5))
    loading = threading.Thread(target=cache.get, args=("slow",))
    loading.start()
    time.sleep(0.2)
    started = time.perf_counter()
    assert cache.loaded() == [] and cache.loading == "slow" and cache.peek("slow") is None
    assert time.perf_counter() - started < 0.5
    loading.join()
    assert cache.loaded() == ["slow"] and cache.loading is None
