"""The fast path's CPU graphs, whose frozen weights inductor packs into oneDNN tensors, go into inductor's
on-disk graph cache and come back from it computing with the live weights (so a later start skips their
build). Run in a fresh process: dynamo's per-code state from other tests' compilations would change the graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMPILE_TWICE = """
import json, torch
from torch._dynamo.utils import counters
from backend.core.fast_forward import FastForward
from tests.helpers.tiny import tiny_llama

def verify_pass(model):
    fast = FastForward(model, compiled=True)  # a new module: torch.compile traces and freezes it again
    logits = fast.forward(torch.tensor([[5, 6, 7]]), fast.new_cache(16)).logits  # [1, 3, vocab]
    torch._dynamo.reset()
    return logits

model = tiny_llama(seed=3).model
first = verify_pass(model)
after_first = dict(counters["inductor"])
with torch.no_grad():  # the final norm's weight doubled: the logits double
    model.model.norm.weight.mul_(2)
second = verify_pass(model)
print(json.dumps({"after_first": after_first, "after_all": dict(counters["inductor"]),
                  "doubled": torch.allclose(second, 2 * first, rtol=1e-5, atol=1e-6)}))
"""


def test_a_graph_with_frozen_onednn_weights_is_built_once_then_read_from_inductors_cache(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_TWICE],
        cwd=ROOT,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    first, total = report["after_first"], report["after_all"]
    assert first["mkldnn_linear_weight_pack_matcher_count"] > 0  # the graph holds oneDNN-packed weights
    assert first.get("fxgraph_cache_bypass", 0) == 0 and first["fxgraph_cache_miss"] == 1
    assert total["fxgraph_cache_hit"] == 1 and total["fxgraph_cache_miss"] == 1  # the second from the cache
    assert report["doubled"]  # the cached graph computes with the live weights, not those it was built with
