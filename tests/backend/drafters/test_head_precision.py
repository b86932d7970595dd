"""A trained head held in float16 while drafting (head_precision): only its own linears change, its drafts
stay within rounding of the float32 head's, and every trained kind built that way through the registry stays
lossless, greedy (single and batched) and sampled."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from backend.core.errors import SpecScopeError
from backend.core.models import matmul_weights
from backend.core.verify import SamplingParams
from backend.drafters import build_drafter, dflash, dspark, eagle3, head_precision, mtp
from backend.drafters.head_precision import StoredLinear, head_dtype, hold_weights_in
from tests.helpers.sampling import PROMPT as SAMPLING_PROMPT
from tests.helpers.sampling import SIGNIFICANCE, exact_joint, goodness_of_fit, sampled_joint, sampling_model
from tests.helpers.trained import (
    PROMPT,
    check_batched,
    first_draft,
    generate,
    greedy,
    reduced_d2t,
    rounded_head,
)

KINDS = {module.KIND: module for module in (eagle3, mtp, dflash, dspark)}


def test_a_stored_linear_keeps_the_activation_dtype_and_the_product():
    linear = nn.Linear(64, 32)
    with torch.no_grad():
        linear.weight.copy_(linear.weight.half().float())  # weights saved in fp16 lose nothing when held in it
        linear.bias.copy_(linear.bias.half().float())
    stored = StoredLinear.holding(linear, torch.float16)
    x = torch.randn(2, 4, 64)  # [B, T, in]: few rows, multiplied in float16 wherever it runs
    out = stored(x)
    assert stored.weight.dtype == torch.float16 and not stored.weight.requires_grad
    assert out.dtype == torch.float32 and out.shape == (2, 4, 32)
    assert torch.allclose(out, linear(x), rtol=1e-2, atol=1e-2)
    assert not torch.equal(out, linear(x))  # the activations really went through float16


def test_beyond_float16_range_it_multiplies_in_the_activation_dtype():
    linear = nn.Linear(8, 4, bias=False)
    stored = StoredLinear.holding(linear, torch.float16)
    x = torch.full((1, 8), 1e6)  # beyond float16's ±65504: a float16 product would be inf
    out = stored(x)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, x @ stored.weight.float().T)


def test_a_product_beyond_float16_range_from_inputs_within_it_is_multiplied_in_the_activation_dtype():
    linear = nn.Linear(8, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0] * 8, [-1.0] * 8, [0.0] * 8]))  # outputs +8x, -8x and 0
    stored = StoredLinear.holding(linear, torch.float16)
    x = torch.full((1, 8), 30000.0)  # within float16, but +-240000 is not: +inf and -inf in one output row
    assert torch.isinf(linear(x.half().float()).half()).sum() == 2  # what a float16 result would hold
    assert torch.equal(stored(x), torch.tensor([[240000.0, -240000.0, 0.0]]))


def test_many_rows_on_a_cpu_without_float16_arithmetic_are_multiplied_in_the_activation_dtype(monkeypatch):
    stored = StoredLinear.holding(nn.Linear(64, 32), torch.float16)
    few, many = torch.randn(1, 8, 64), torch.randn(3, 3, 64)  # [B, T, in]: 8 rows, and 9

    def in_float32(x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, stored.weight.float(), stored.bias.float())

    monkeypatch.setattr(head_precision, "CPU_FLOAT16_ARITHMETIC", False)
    assert torch.equal(stored(many), in_float32(many))
    assert not torch.equal(stored(few), in_float32(few))  # still through float16
    monkeypatch.setattr(head_precision, "CPU_FLOAT16_ARITHMETIC", True)
    assert not torch.equal(stored(many), in_float32(many))  # where float16 is native, always float16


def test_auto_is_float16_for_a_float32_target_on_the_cpu_and_a_wrong_choice_is_refused(tiny):
    assert head_dtype("auto", tiny) == torch.float16  # the tiny target: fp32 on the CPU
    assert head_dtype("float32", tiny) == torch.float32 and head_dtype("bfloat16", tiny) == torch.bfloat16
    with pytest.raises(SpecScopeError, match="head_precision must be one of auto, float32, float16, bfloat16"):
        build_drafter("eagle3", tiny, {"head_precision": "fp8"})


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_heads_own_linears_change(tiny, kind):
    module = KINDS[kind]
    drafter = module.drafter(tiny, module.new_head(tiny, d2t=reduced_d2t()).eval())
    weights, names = matmul_weights(drafter.head), set(drafter.head.state_dict())
    hold_weights_in(drafter.head, torch.float16)
    linears = [m for m in drafter.head.modules() if isinstance(m, nn.Linear)]
    assert linears and all(isinstance(m, StoredLinear) and m.weight.dtype == torch.float16 for m in linears)
    assert matmul_weights(drafter.head) == weights and set(drafter.head.state_dict()) == names
    assert drafter.head.parts.lm_head.weight.dtype == torch.float32  # the borrowed target parts are untouched
    if kind == "mtp":  # the copy of the target's LM head rows it keeps outside its linears moves too
        assert drafter.head.head_weight.dtype == torch.float16
    assert tiny.model.get_input_embeddings().weight.dtype == torch.float32


def _saved(kind: str, model, folder) -> str:
    """A rounded head of `kind` (fp16-exact weights) saved to `folder`."""
    module = KINDS[kind]
    module.save(rounded_head(module, model, d2t=reduced_d2t()), model, folder)
    return str(folder)


def _built(kind: str, model, folder: str, precision: str):
    return build_drafter(kind, model, {"drafter_path": folder, "head_precision": precision})


@pytest.mark.parametrize("kind", KINDS)
def test_float16_drafts_stay_within_rounding_of_float32(tiny, tmp_path, kind):
    sampling = SamplingParams(temperature=1.0)
    folder = _saved(kind, tiny, tmp_path)
    full = first_draft(_built(kind, tiny, folder, "float32"), tiny, PROMPT, 4, sampling)
    half_drafter = _built(kind, tiny, folder, "float16")
    assert any(isinstance(m, StoredLinear) for m in half_drafter.head.modules())
    half = first_draft(half_drafter, tiny, PROMPT, 4, sampling)
    assert half.tokens[0] == full.tokens[0]  # the first draft comes from the same distribution, same seed
    assert torch.allclose(half.probs[0], full.probs[0], atol=2e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_float16_head_built_by_the_registry_is_lossless(tiny, tmp_path, kind):
    drafter = _built(kind, tiny, _saved(kind, tiny, tmp_path), "float16")
    for draft_len in (1, 4):
        result = generate(tiny, PROMPT, 40, drafter, draft_len)
        assert result.output_ids == greedy(tiny, PROMPT, 40)
        assert all(step.drafted for step in result.steps[:-1])


@pytest.mark.parametrize("kind", KINDS)
def test_float16_heads_in_a_batch_are_lossless(tiny, kind):
    module = KINDS[kind]

    class HalfKind:  # the kind's drafter with its head held in float16, for the shared batch check
        @staticmethod
        def new_head(model, d2t=None):
            return module.new_head(model, d2t=d2t)

        @staticmethod
        def drafter(model, head):
            built = module.drafter(model, head.eval())
            hold_weights_in(built.head, torch.float16)
            return built

    check_batched(HalfKind, tiny)


@pytest.mark.parametrize("kind", ["eagle3", "dspark"])
def test_sampling_with_a_float16_head_matches_the_target(kind):
    model, sampling = sampling_model(), SamplingParams(temperature=0.8)
    module = KINDS[kind]
    drafter = module.drafter(model, module.new_head(model).eval())
    hold_weights_in(drafter.head, torch.float16)
    assert first_draft(drafter, model, SAMPLING_PROMPT, 2, sampling).probs is not None
    counts = sampled_joint(model, drafter, sampling, draft_len=3)
    assert goodness_of_fit(counts, exact_joint(model, sampling)) > SIGNIFICANCE
