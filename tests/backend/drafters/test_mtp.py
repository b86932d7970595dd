"""The MTP drafter on tiny random Llamas: the module's shape and what it borrows from the target, the
training-time masks and their agreement with drafting, learning, the weights folder, and losslessness
through the engine (greedy and sampling). Shared checks live in tests/helpers/trained.py."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from backend.core.verify import SamplingParams
from backend.drafters import eagle3, mtp
from backend.drafters.feature_chain import unroll
from backend.drafters.trained import DrafterWeightsError, TargetParts
from backend.lab.prompts import encode_conversation
from tests.helpers.sampling import sampling_model
from tests.helpers.tiny import tiny_llama
from tests.helpers.trained import (
    PROMPT,
    REDUCED_12,
    VOCABULARIES,
    batch_of,
    check_batched,
    check_causal,
    check_learns_to_draft,
    check_lossless,
    check_missing_states_stop_drafting,
    check_round_trip,
    check_sampling,
    check_training_matches_drafting,
    greedy,
    reduced_d2t,
    self_distilled,
    short_prompts,
    train,
)


def test_the_module_borrows_the_targets_embeddings_norm_and_head(tiny):
    head = mtp.new_head(tiny)
    assert head.config == mtp.MtpConfig(draft_vocab_size=64, intermediate_size=128)
    assert mtp.training_layers(tiny) == (4,) and mtp.MtpDrafter(tiny, head).target_hidden_layers == (4,)
    layer = [
        f"layer.{name}.weight"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "post_attention_norm", "gate_proj", "up_proj", "down_proj")
    ]
    assert list(head.state_dict()) == [
        "embed_norm.weight",
        "hidden_norm.weight",
        "proj.weight",
        "layer.input_norm.weight",
        *layer,
    ]
    lm_head = tiny.model.get_output_embeddings().weight
    assert head.head_weight.data_ptr() == lm_head.data_ptr()  # the whole vocabulary: the very same weights
    reduced = mtp.new_head(tiny, d2t=reduced_d2t())
    assert torch.equal(reduced.head_weight, lm_head[reduced_d2t()])
    with pytest.raises(Exception, match="unknown mtp settings: layers"):
        mtp.new_head(tiny, {"layers": [1, 2, 3]})


def test_logits_are_the_targets_head_on_its_final_norm(tiny):
    head = mtp.new_head(tiny, d2t=reduced_d2t())
    h = torch.randn(2, 5, 64)
    with torch.no_grad():
        full = tiny.model.lm_head(tiny.model.model.norm(h))  # [2, 5, V]
        assert torch.allclose(head.logits(h), full[..., reduced_d2t()], atol=1e-6)


def test_shapes_and_metrics_on_a_training_batch(tiny):
    batch = batch_of(tiny, [PROMPT, PROMPT[::-1]])
    head = mtp.new_head(tiny)
    outputs = unroll(head, batch.input_ids, batch.hidden, steps=2)
    assert [tuple(h.shape) for h in outputs] == [(2, len(PROMPT), 64)] * 2
    loss, metrics = mtp.training_loss(head, TargetParts.of(tiny), batch, steps=2)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert set(metrics) == {"loss_step0", "acc_step0", "loss_step1", "acc_step1"}


def test_step_weights_are_fastmtps(tiny):
    """loss = sum_k 0.6^k loss_k / sum_k 0.6^k."""
    loss, metrics = mtp.training_loss(mtp.new_head(tiny), TargetParts.of(tiny), batch_of(tiny, [PROMPT]), steps=3)
    weights = [1.0, 0.6, 0.36]
    expected = sum(w * metrics[f"loss_step{k}"] for k, w in enumerate(weights)) / sum(weights)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


def test_training_time_test_never_sees_later_positions(tiny):
    check_causal(mtp, tiny)


@pytest.mark.parametrize("vocabulary", ["whole", "reduced"])
def test_training_computes_exactly_what_drafting_does(tiny, vocabulary):
    check_training_matches_drafting(mtp, tiny, VOCABULARIES[vocabulary])


def test_a_few_optimizer_steps_reduce_the_loss(tiny):
    losses = train(mtp, mtp.new_head(tiny), tiny, self_distilled(tiny, short_prompts(2), 24), steps=15)
    assert losses[-1] < losses[0] - 0.1


def test_no_gradient_reaches_the_shared_head_norm_or_embeddings():
    model = tiny_llama(seed=0)  # parameters require grad, as a freshly loaded model's do
    head = mtp.new_head(model, d2t=reduced_d2t())
    loss, _ = mtp.training_loss(head, TargetParts.of(model), batch_of(model, [PROMPT]))
    loss.backward()
    assert all(p.grad is None for p in model.model.parameters())
    assert all(p.grad is not None for p in head.parameters())


def test_cost_includes_the_shared_head(tiny):
    layer = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128  # one target layer: 36,864 weights
    whole = mtp.MtpDrafter(tiny, mtp.new_head(tiny)).cost()
    assert whole.tle_per_token == pytest.approx((2 * 64 * 64 + layer + 64 * 64) / layer)  # proj + block + head
    reduced = mtp.MtpDrafter(tiny, mtp.new_head(tiny, d2t=reduced_d2t())).cost()
    assert reduced.tle_per_token == pytest.approx((2 * 64 * 64 + layer + 13 * 64) / layer)


def test_save_and_load_give_identical_drafts(tiny, tmp_path):
    check_round_trip(mtp, tiny, tmp_path)


def test_bad_folders_say_what_is_wrong(tiny, tmp_path):
    mtp.save(mtp.new_head(tiny, d2t=reduced_d2t()), tiny, tmp_path)
    with pytest.raises(DrafterWeightsError, match="holds a mtp drafter, not eagle3"):
        eagle3.Eagle3Drafter.load(tmp_path, tiny)
    with pytest.raises(DrafterWeightsError, match="vocabulary 64"):
        mtp.MtpDrafter.load(tmp_path, tiny_llama(seed=0, vocab_size=80))
    save_file({"d2t": torch.tensor([-1, 5])}, str(tmp_path / "vocab_map.safetensors"))
    with pytest.raises(DrafterWeightsError, match="outside the target"):
        mtp.MtpDrafter.load(tmp_path, tiny)
    (tmp_path / "vocab_map.safetensors").unlink()
    with pytest.raises(DrafterWeightsError, match="vocab_map.safetensors is missing"):
        mtp.MtpDrafter.load(tmp_path, tiny)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(DrafterWeightsError, match="model.safetensors is missing"):
        mtp.MtpDrafter.load(tmp_path, tiny)


@pytest.mark.parametrize("draft_len", [1, 3, 8])
@pytest.mark.parametrize("vocabulary", ["whole", "reduced"])
def test_untrained_module_is_lossless(tiny, draft_len, vocabulary):
    check_lossless(mtp, tiny, draft_len, VOCABULARIES[vocabulary])


def test_batched_rows_are_lossless_and_draft(tiny):
    check_batched(mtp, tiny)


def test_missing_hidden_states_stop_drafting_but_not_decoding(tiny):
    check_missing_states_stop_drafting(mtp, tiny)


def test_folders_from_before_the_shared_draft_layer_still_load(tiny, tmp_path):
    """The block's input norm was once saved as `input_norm.weight`; such folders load to the same head."""
    from safetensors.torch import load_file

    head = mtp.new_head(tiny, d2t=reduced_d2t())
    with torch.no_grad():
        head.layer.input_norm.weight.uniform_(0.5, 1.5)
    mtp.save(head, tiny, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["input_norm.weight"] = state.pop("layer.input_norm.weight")
    save_file(state, str(tmp_path / "model.safetensors"))
    loaded = mtp.load(tmp_path, tiny).head
    assert torch.equal(loaded.layer.input_norm.weight, head.layer.input_norm.weight.half().float())


def test_a_trained_module_gets_drafts_accepted(tiny):
    check_learns_to_draft(mtp, tiny)


def test_sampling_with_the_drafter_matches_the_target():
    check_sampling(mtp, sampling_model(), SamplingParams(temperature=1.0), REDUCED_12)


@pytest.mark.slow
def test_untrained_module_is_lossless_on_the_default_model(default_model):
    drafter = mtp.MtpDrafter(default_model, mtp.new_head(default_model))
    prompt = encode_conversation(default_model.tokenizer, ["Name three primary colours."], [])
    assert greedy(default_model, prompt, 24, drafter, draft_len=4) == greedy(default_model, prompt, 24)
    assert drafter.cost().tle_per_token == pytest.approx(9.19, abs=0.01)  # its weights over a target layer's
