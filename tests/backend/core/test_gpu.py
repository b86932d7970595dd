"""GPU checks (run by scripts/gpu_check.sh on a CUDA machine; skipped elsewhere): the engine on CUDA
in bf16 is lossless against Hugging Face `generate` on the same device, and its step timings are
measured after synchronising."""

from __future__ import annotations

import pytest
import torch

from backend.core.engine import GenerationSettings
from backend.core.models import load_model
from backend.drafters import build_drafter
from backend.lab.prompts import DEFAULT_SUITE, load_suite
from backend.lab.runner import Runner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def cuda_runner():
    target = load_model("default", device="cuda")
    assert target.dtype == torch.bfloat16
    return Runner(target)


@torch.inference_mode()
def test_bf16_engine_is_lossless_on_cuda(cuda_runner):
    question = next(q for q in load_suite(DEFAULT_SUITE) if q.category == "code_editing")
    plain = cuda_runner.run(question.turns[:1], None, GenerationSettings(64, draft_len=0))
    inputs = torch.tensor([plain.turns[0].prompt_ids], device="cuda")
    hf = cuda_runner.target.model.generate(
        inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=64, do_sample=False, pad_token_id=2
    )
    assert hf[0, inputs.shape[1] :].tolist() == plain.output_ids
    for name in ("ngram", "suffix"):
        for draft_len in (4, "auto"):
            result = cuda_runner.run(
                question.turns[:1], build_drafter(name, cuda_runner.target), GenerationSettings(64, draft_len=draft_len)
            )
            assert result.output_ids == plain.output_ids, (name, draft_len)


def test_step_timings_are_positive_and_synchronised(cuda_runner):
    result = cuda_runner.run(
        ["Count from one to twenty."], build_drafter("suffix", cuda_runner.target), GenerationSettings(32, draft_len=4)
    )
    assert all(step.verify_s > 0 for step in result.steps)
    assert result.turns[0].decode_s == pytest.approx(sum(s.draft_s + s.verify_s for s in result.steps))
