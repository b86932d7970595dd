"""The worker's model cache: least recently used out over the budget, drafters kept per target,
and nothing blocks on a model that is still loading."""

from __future__ import annotations

import threading
import time

from backend.drafters import DrafterOptions
from backend.serving.model_cache import ModelCache, model_bytes
from tests.helpers.tiny import tiny_llama


def loader_of(models: dict):
    def load(spec, **_):
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
    """The load is held until the status questions have been answered: if they waited for it, the
    questioning thread would still be blocked when the load is released."""
    release, model = threading.Event(), tiny_llama(seed=0)

    def held_load(spec, **_):
        release.wait()
        return model

    cache = ModelCache(budget_bytes=10**9, loader=held_load)
    loading = threading.Thread(target=cache.get, args=("slow",))
    loading.start()
    while cache.loading != "slow":
        time.sleep(0.01)
    answers = []
    asking = threading.Thread(target=lambda: answers.append((cache.loaded(), cache.loading, cache.peek("slow"))))
    asking.start()
    asking.join(timeout=60)
    answered_while_loading = not asking.is_alive()
    release.set()
    loading.join()
    assert answered_while_loading and answers == [([], "slow", None)]
    assert cache.loaded() == ["slow"] and cache.loading is None
