"""EAGLE-3 on tiny random Llamas: shapes, the training-time test's masks and its agreement with drafting,
learning, the weights folder, and losslessness through the engine (greedy and sampling). The checks
shared with the other trained kinds live in tests/helpers/trained.py."""

from __future__ import annotations

import json

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
    generate,
    greedy,
    reduced_d2t,
    self_distilled,
    short_prompts,
    train,
)

# ---------------------------------------------------------------------------------------------------
# the head


def test_default_layers_are_eagle3s_low_middle_high():
    assert eagle3.default_layers(30) == (2, 15, 27)  # SmolLM2-135M
    assert eagle3.default_layers(32) == (2, 16, 29)
    assert eagle3.default_layers(4) == (1, 2, 3)  # too shallow for 2, L//2, L-3: spread over 1..L-1
    assert eagle3.default_layers(6) == (1, 3, 5)


def test_new_head_settings_and_errors(tiny):
    head = eagle3.new_head(tiny)
    assert head.config == eagle3.Eagle3Config((1, 2, 3), 64, 128)
    assert eagle3.training_layers(tiny) == (1, 2, 3, 4)
    assert eagle3.Eagle3Drafter(tiny, head).target_hidden_layers == (1, 2, 3)
    layer = [
        f"layer.{name}.weight"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "post_attention_norm", "gate_proj", "up_proj", "down_proj")
    ]
    # the target's embeddings are borrowed, not stored
    assert list(head.state_dict()) == [
        "fc.weight",
        "embed_norm.weight",
        "hidden_norm.weight",
        *layer,
        "norm.weight",
        "lm_head.weight",
    ]
    counts = torch.zeros(64)
    counts[[7, 9, 30]] = torch.tensor([5.0, 3.0, 4.0])
    assert eagle3.new_head(tiny, {"draft_vocab_size": 3}, counts).d2t.tolist() == [7, 9, 30]
    for bad in ({"layers": [1, 9]}, {"draft_vocab_size": 65}, {"depth": 2}):
        with pytest.raises(Exception, match="layers|vocabulary|unknown"):
            eagle3.new_head(tiny, bad)


def test_shapes_on_a_training_batch(tiny):
    batch = batch_of(tiny, [PROMPT, PROMPT[::-1]])
    head = eagle3.new_head(tiny, d2t=reduced_d2t())
    outputs = unroll(head, batch.input_ids, batch.hidden, steps=3)
    assert [tuple(h.shape) for h in outputs] == [(2, len(PROMPT), 64)] * 3
    assert head.logits(outputs[0]).shape == (2, len(PROMPT), 13)
    loss, metrics = eagle3.training_loss(head, TargetParts.of(tiny), batch, steps=3)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert set(metrics) == {f"{name}_step{j}" for name in ("loss", "acc") for j in range(3)}
    assert all(0 <= metrics[f"acc_step{j}"] <= 1 for j in range(3))


@pytest.mark.parametrize("module", [eagle3, mtp])
def test_feature_noise_is_bounded_by_each_states_rms_and_only_in_training(tiny, module):
    torch.manual_seed(0)
    batch = batch_of(tiny, [PROMPT, PROMPT[::-1]])
    head = module.new_head(tiny)
    clean = head.features(batch.hidden)  # [B, T, F]
    head.feature_noise = 0.1
    head.train()
    noisy, again = head.features(batch.hidden), head.features(batch.hidden)
    assert not torch.equal(noisy, again)  # fresh noise on every pass
    size = head.parts.hidden_size
    for index, layer in enumerate(head.feature_layers):
        state = batch.hidden[layer]  # [B, T, H]
        rms = state.pow(2).mean(-1, keepdim=True).sqrt()  # [B, T, 1]
        shift = (noisy[..., index * size : (index + 1) * size] - state).abs() / rms  # [B, T, H], in units of RMS
        assert shift.max() <= 0.1 + 1e-5  # a share of each position's own size: never more than the level
        assert 0.04 < shift.mean() < 0.06  # |U(-1, 1)| averages 1/2
    head.eval()
    assert torch.equal(head.features(batch.hidden), clean)  # drafting reads the states as they are


def test_training_time_test_never_sees_later_positions(tiny):
    check_causal(eagle3, tiny)


@pytest.mark.parametrize("vocabulary", ["whole", "reduced"])
def test_training_computes_exactly_what_drafting_does(tiny, vocabulary):
    check_training_matches_drafting(eagle3, tiny, VOCABULARIES[vocabulary])


def test_a_few_optimizer_steps_reduce_the_loss(tiny):
    batch = self_distilled(tiny, short_prompts(2), 24)
    losses = train(eagle3, eagle3.new_head(tiny), tiny, batch, steps=15)
    assert losses[-1] < losses[0] - 0.1


def test_no_gradient_reaches_the_target():
    model = tiny_llama(seed=0)  # parameters require grad, as a freshly loaded model's do
    head = eagle3.new_head(model)
    loss, _ = eagle3.training_loss(head, TargetParts.of(model), batch_of(model, [PROMPT]))
    loss.backward()
    assert all(p.grad is None for p in model.model.parameters())
    assert all(p.grad is not None for p in head.parameters())


def test_cost_is_one_layer_fc_and_the_reduced_head_in_target_layers(tiny):
    head = eagle3.new_head(tiny, d2t=reduced_d2t())
    layer = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128  # the target's: q, o, k, v, MLP = 36,864 weights
    drafter_layer = 128 * 64 + 2 * 128 * 32 + 64 * 64 + 3 * 64 * 128  # q, k, v read [emb; h]: 2H wide
    expected = (3 * 64 * 64 + drafter_layer + 13 * 64) / layer
    cost = eagle3.Eagle3Drafter(tiny, head).cost()
    assert cost.tle_per_token == pytest.approx(expected)
    assert cost.target_tle_per_forward == pytest.approx(tiny.tle_per_forward)


# ---------------------------------------------------------------------------------------------------
# weights folders


def test_save_and_load_give_identical_drafts(tiny, tmp_path):
    check_round_trip(eagle3, tiny, tmp_path)


def test_a_whole_vocabulary_head_is_saved_without_a_vocabulary_map(tiny, tmp_path):
    eagle3.save(eagle3.new_head(tiny), tiny, tmp_path)
    assert not (tmp_path / "vocab_map.safetensors").exists()
    assert torch.equal(eagle3.Eagle3Drafter.load(tmp_path, tiny).head.d2t, torch.arange(64))


def _edit_config(folder, **settings) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["settings"].update(settings)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda f: save_file({"d2t": torch.tensor([3, 64])}, str(f / "vocab_map.safetensors")), "outside the target"),
        (lambda f: (f / "vocab_map.safetensors").unlink(), "vocab_map.safetensors is missing"),
        (lambda f: _edit_config(f, layers=[1, 2]), "usable eagle3 head"),
        (lambda f: _edit_config(f, draft_vocab_size=12), "vocabulary map has 13 tokens"),
        (lambda f: _edit_config(f, heads=3), "unknown eagle3 settings: heads"),
    ],
)
def test_bad_folders_say_what_is_wrong(tiny, tmp_path, damage, message):
    eagle3.save(eagle3.new_head(tiny, d2t=reduced_d2t()), tiny, tmp_path)
    damage(tmp_path)
    with pytest.raises(DrafterWeightsError, match=message):
        eagle3.Eagle3Drafter.load(tmp_path, tiny)


def test_folders_for_another_kind_or_target_are_refused(tiny, tmp_path):
    eagle3.save(eagle3.new_head(tiny), tiny, tmp_path)
    with pytest.raises(DrafterWeightsError, match="holds a eagle3 drafter, not mtp"):
        mtp.MtpDrafter.load(tmp_path, tiny)
    with pytest.raises(DrafterWeightsError, match="vocabulary 64"):
        eagle3.Eagle3Drafter.load(tmp_path, tiny_llama(seed=0, vocab_size=80))
    with pytest.raises(DrafterWeightsError, match="no trained eagle3 drafter"):
        eagle3.Eagle3Drafter.load(tmp_path / "absent", tiny)


# ---------------------------------------------------------------------------------------------------
# through the engine


@pytest.mark.parametrize("draft_len", [1, 3, 8])
@pytest.mark.parametrize("vocabulary", ["whole", "reduced"])
def test_untrained_head_is_lossless(tiny, draft_len, vocabulary):
    check_lossless(eagle3, tiny, draft_len, VOCABULARIES[vocabulary])


def test_batched_rows_are_lossless_and_draft(tiny):
    check_batched(eagle3, tiny)


def test_a_one_token_prompt_drafts_from_the_second_step(tiny):
    drafter = eagle3.Eagle3Drafter(tiny, eagle3.new_head(tiny))
    result = generate(tiny, [5], 12, drafter, draft_len=3)
    assert result.output_ids == greedy(tiny, [5], 12)
    assert result.steps[0].drafted == [] and len(result.steps[1].drafted) == 3


def test_missing_hidden_states_stop_drafting_but_not_decoding(tiny):
    check_missing_states_stop_drafting(eagle3, tiny)


def test_a_trained_head_gets_drafts_accepted(tiny):
    check_learns_to_draft(eagle3, tiny)


@pytest.mark.parametrize(
    "sampling, d2t",
    [
        (SamplingParams(temperature=1.0), REDUCED_12),
        (SamplingParams(temperature=0.7, top_k=6, top_p=0.9), None),
    ],
    ids=["T1-reduced-vocab", "T0.7-topk6-topp0.9"],
)
def test_sampling_with_the_drafter_matches_the_target(sampling, d2t):
    check_sampling(eagle3, sampling_model(), sampling, d2t)


@pytest.mark.slow
def test_untrained_head_is_lossless_on_the_default_model(default_model):
    head = eagle3.new_head(default_model)
    assert head.config.layers == (2, 15, 27) and head.config.draft_vocab_size == 8192
    drafter = eagle3.Eagle3Drafter(default_model, head)
    prompt = encode_conversation(default_model.tokenizer, ["Name three primary colours."], [])
    assert greedy(default_model, prompt, 24, drafter, draft_len=4) == greedy(default_model, prompt, 24)
    assert drafter.cost().tle_per_token == pytest.approx(2.77, abs=0.01)
