"""The fast path's CPU graphs, whose frozen weights inductor packs into oneDNN tensors, go into inductor's
on-disk graph cache, as a later start needs: a new process with the same packed weights reads both
graphs (the verify graph and the one-token graph, built with max-autotune) from the cache, other frozen
weights (such as a norm's) read live; one with a changed packed weight finds no entry for either graph
(it stops there instead of building them). Each pass runs in a fresh process, as a start does, and only
the first one compiles. Inductor's kernel templates are compiled once per source
(inductor_templates.py) and render as before; on AVX-512 CPUs an fp32 GEMM traced with 4 rows uses 4-row
register blocks, one traced with 1 row the 8-row blocks it used before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow  # compiles the target's graphs: `make test-fast` leaves it out
VERIFY_PASS = """
import json, sys, torch
from torch._dynamo.utils import counters
from torch._inductor import compile_fx
from backend.core.fast_forward import FastForward
from tests.helpers.tiny import tiny_llama

model = tiny_llama(seed=3).model
with torch.no_grad():
    if sys.argv[1] in ("norm", "packed"):  # the final norm's weight doubled: the logits double
        model.model.norm.weight.mul_(2)
    if sys.argv[1] == "packed":  # and a packed weight changed
        model.model.layers[0].mlp.down_proj.weight.mul_(-1)
if sys.argv[1] == "packed":  # a cache miss stops before building: the miss is what this start shows
    def not_built(*args, **kwargs):
        raise RuntimeError("not built")
    compile_fx.fx_codegen_and_compile = not_built
logits = {}
for compiled in (True, False):
    fast = FastForward(model, compiled)
    cache = fast.new_cache(16)
    passes = []
    for ids in ([5, 6, 7], [8]):  # the verify graph, then the one-token graph
        try:
            passes.append(fast.forward(torch.tensor([ids]), cache).logits[0, -1])  # [vocab]
        except Exception as error:
            if "not built" not in str(error):
                raise
            torch._dynamo.reset()
    logits[compiled] = torch.cat(passes) if len(passes) == 2 else None  # [2 * vocab]
built = logits[True] is not None
print(json.dumps({"counters": dict(counters["inductor"]), "logits": logits[True].tolist() if built else None,
                  "as_eager": built and torch.allclose(logits[True], logits[False], rtol=1e-4, atol=1e-5)}))
"""


def verify_pass(weights: str, cache: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", VERIFY_PASS, weights],
        cwd=ROOT,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_frozen_onednn_weights_are_cached_by_value_and_other_frozen_weights_read_live(tmp_path):
    import torch

    first = verify_pass("original", tmp_path)
    assert first["counters"]["mkldnn_linear_weight_pack_matcher_count"] > 0  # oneDNN-packed weights
    assert first["counters"].get("fxgraph_cache_bypass", 0) == 0 and first["counters"]["fxgraph_cache_miss"] == 2
    norm = verify_pass("norm", tmp_path)
    assert norm["counters"].get("fxgraph_cache_hit") == 2 and norm["as_eager"]  # cached, the norm read live
    torch.testing.assert_close(torch.tensor(norm["logits"]), 2 * torch.tensor(first["logits"]))
    packed = verify_pass("packed", tmp_path)
    assert packed["counters"]["fxgraph_cache_miss"] == 2 and packed["counters"].get("fxgraph_cache_hit", 0) == 0
    assert packed["logits"] is None  # each graph went on to be built (and was stopped there)


def test_inductor_compiles_each_template_source_once_and_renders_it_as_before():
    from torch._inductor.codegen.common import KernelTemplate

    from backend.core.inductor_templates import compile_templates_once

    assert compile_templates_once()
    template = KernelTemplate._template_from_string("{{ rows }} x {{ columns|indent_except_first(1) }}")
    assert KernelTemplate._template_from_string("{{ rows }} x {{ columns|indent_except_first(1) }}") is template
    assert template.render(rows=1, columns="a\nb") == "1 x a\n    b" and template.render(rows=2, columns="c") == "2 x c"


def test_avx512_fp32_micro_kernels_offer_four_row_blocks_once():
    from backend.core.inductor_templates import FOUR_ROW_BLOCK, offer_four_row_blocks

    assert offer_four_row_blocks() and offer_four_row_blocks()
    from torch._inductor.codegen import cpp_micro_gemm as micro  # after inductor's lowering, as the call imports it

    configs = micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]
    fp32 = [c for c in configs if c.vec_isa_cls is micro.VecAVX512 and c.input_dtype == c.input2_dtype == torch.float]
    blocks = [tuple(config.register_blocking) for config in fp32]
    assert blocks.count(FOUR_ROW_BLOCK) == 1 and (8, 48, 1) in blocks  # added once, beside inductor's own


@pytest.mark.skipif(
    not torch.backends.cpu.get_cpu_capability().startswith("AVX512"), reason="AVX-512 micro-kernels need AVX-512"
)
@pytest.mark.parametrize("traced_rows", [4, 1])
def test_a_gemm_traced_with_four_rows_gets_four_row_blocks(traced_rows):
    from torch._inductor.utils import fresh_cache, run_and_get_code

    from backend.core.fast_forward import CPU_GRAPHS
    from backend.core.inductor_templates import adjust_templates

    adjust_templates()
    linear = torch.nn.Linear(96, 192, bias=False).eval().requires_grad_(False)
    rows = torch.randn(traced_rows, 96)  # [M, K]
    if traced_rows > 1:  # as the verify graph: the row count symbolic (a one-token graph's is 1)
        torch._dynamo.mark_dynamic(rows, 0, min=2, max=65)
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(CPU_GRAPHS), fresh_cache():
        out, sources = run_and_get_code(torch.compile(linear), rows)
    torch.testing.assert_close(out, linear(rows))
    code = "\n".join(sources)
    # an 8-row block's micro-kernel calls the 4-row one for a 4-row tail; a 4-row block never calls an 8-row one
    assert "_kernel<4, 48, accum" in code
    assert ("_kernel<8, 48, accum" in code) == (traced_rows == 1)
