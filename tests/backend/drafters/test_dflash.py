"""DFlash on tiny random Llamas: shapes, one head forward per proposal, the anchored-block mask, the
training path agreeing with drafting through the engine, learning, the weights folder, and losslessness
through the engine (greedy and sampling). Shared helpers live in tests/helpers/trained.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from backend.core.drafter import DraftRequest
from backend.core.models import matmul_weights
from backend.core.verify import SamplingParams
from backend.drafters import dflash, head_io
from backend.drafters.trained import DrafterWeightsError, TargetParts, TrainBatch
from backend.lab.prompts import encode_conversation
from tests.helpers.sampling import PROMPT as SAMPLING_PROMPT
from tests.helpers.sampling import (
    SETTINGS,
    SIGNIFICANCE,
    VOCAB,
    exact_joint,
    goodness_of_fit,
    sampled_joint,
    sampling_model,
)
from tests.helpers.tiny import tiny_llama
from tests.helpers.trained import (
    PROMPT,
    batch_of,
    check_missing_states_stop_drafting,
    count_calls,
    first_draft,
    generate,
    greedy,
    random_prompts,
    self_distilled,
    train,
)


@pytest.fixture(scope="module")
def distilled(tiny) -> TrainBatch:
    return self_distilled(tiny, random_prompts(), 40)


@pytest.fixture(scope="module")
def trained(tiny, distilled):
    head = dflash.new_head(tiny, {"block_size": 4})
    train(dflash, head, tiny, distilled, steps=200)
    return head


# ---------------------------------------------------------------------------------------------------
# the head


def test_layers_spread_over_depth_and_training_needs_the_final_state(tiny):
    assert dflash.spread_layers(30) == (1, 15, 29)
    assert dflash.spread_layers(4) == (1, 2, 3)
    assert dflash.training_layers(tiny, {}) == (1, 2, 3, 4)
    assert dflash.training_layers(tiny, {"target_layers": [2]}) == (2, 4)
    config = dflash.DFlashConfig((1, 3), num_layers=2, block_size=5, draft_vocab_size=32)
    assert dflash.DFlashConfig.for_target(TargetParts.of(tiny), **json.loads(json.dumps(config.to_dict()))) == config


def test_shapes_frozen_borrowed_parts_and_reduced_vocabulary(tiny, distilled):
    d2t = torch.tensor([1, 4, 5, 7, 9, 13, 22, 40])
    head = dflash.new_head(tiny, {"block_size": 3, "num_layers": 2}, d2t=d2t)
    assert head.config.target_layers == (1, 2, 3) and head.config.draft_vocab_size == 8
    embeddings = tiny.model.get_input_embeddings().weight
    assert all(tensor.data_ptr() != embeddings.data_ptr() for tensor in head.state_dict().values())
    assert head.mask_embedding.shape == (64,)  # the one embedding the head owns: "to be filled"
    assert "d2t" not in head.state_dict()  # saved as the vocabulary map, not as a weight
    assert torch.equal(head.lm_head.weight, tiny.model.lm_head.weight[d2t])
    ids = distilled.input_ids[:2]  # [2, T]
    t = ids.shape[1]
    context = head.encode_context({k: v[:2] for k, v in distilled.hidden.items()}, torch.arange(t).expand(2, t))
    assert context.length == t and context.keys[0].shape == (2, 2, t, 16)
    anchors = torch.tensor([[3, 10, 20], [5, 6, 30]])  # [B, K]
    hidden = head(ids.gather(1, anchors), anchors, context, torch.arange(t) < anchors[..., None])
    assert hidden.shape == (2, 3, 4, 64)  # [B, K, 1 + D, H]
    assert head.logits(hidden).shape == (2, 3, 4, 8)


def test_the_block_is_drafted_in_one_head_forward_per_proposal(tiny):
    head = dflash.new_head(tiny)
    calls = count_calls(head)
    result = generate(tiny, PROMPT, 30, dflash.DFlashDrafter(tiny, head), draft_len=3)
    proposals = sum(1 for step in result.steps if step.draft_len > 0)
    assert calls[0] == proposals > 5
    assert all(len(step.drafted) == 3 for step in result.steps if step.draft_len == 3)


def test_blocks_see_only_target_states_before_their_anchor(tiny, distilled):
    head = dflash.new_head(tiny)
    ids = distilled.input_ids[:1]
    t, anchor = ids.shape[1], 20

    def block(hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        context = head.encode_context(hidden, torch.arange(t)[None])
        positions = torch.tensor([[anchor]])
        return head(ids[:, anchor : anchor + 1], positions, context, torch.arange(t)[None, None] < anchor)

    states = {k: v[:1] for k, v in distilled.hidden.items()}
    before = block(states)
    later = {
        k: torch.cat([v[:, :anchor], v[:, anchor:] + 5 * torch.randn_like(v[:, anchor:])], 1) for k, v in states.items()
    }
    torch.testing.assert_close(block(later), before)  # states at and after the anchor are invisible
    earlier = {k: v.clone() for k, v in states.items()}
    earlier[2][:, anchor - 1] += 5.0
    assert not torch.allclose(block(earlier), before)  # the state that predicted the anchor is seen


def test_the_training_path_drafts_what_the_engine_session_drafts(tiny):
    """Many masked blocks in one training pass give the same logits as the session's incremental drafting
    from the engine's hidden states, anchor by anchor: the rows of the features line up."""
    head = dflash.new_head(tiny, {"block_size": 4})
    seen: list[torch.Tensor] = []
    head.lm_head.register_forward_hook(lambda module, args, out: seen.append(out.detach().clone()))
    result = generate(tiny, PROMPT, 24, dflash.DFlashDrafter(tiny, head), draft_len=4)
    drafted_logits = list(seen)  # [n, Vd] per proposal
    sequence = PROMPT + result.output_ids
    batch = batch_of(tiny, [sequence])
    anchors, committed = [], len(PROMPT)
    for step in result.steps:
        if step.draft_len > 0:
            anchors.append(committed - 1)
        committed += len(step.emitted)
    positions = torch.tensor([anchors])  # [1, K]
    with torch.no_grad():
        t = len(sequence)
        context = head.encode_context(batch.hidden, torch.arange(t)[None])
        hidden = head(batch.input_ids.gather(1, positions), positions, context, torch.arange(t) < positions[..., None])
        logits = head.logits(hidden[0, :, 1:])  # [K, D, Vd]
    assert len(drafted_logits) == len(anchors) > 3
    for k, drafted in enumerate(drafted_logits):
        torch.testing.assert_close(drafted, logits[k, : drafted.shape[0]], atol=1e-4, rtol=1e-4)


def test_a_few_steps_on_a_fixed_batch_reduce_the_loss(tiny, distilled):
    head = dflash.new_head(tiny, {"block_size": 4})
    losses = train(dflash, head, tiny, distilled, steps=30, fixed_anchors=True)
    assert losses[-1] < 0.5 * losses[0]
    _, metrics = dflash.training_loss(head, TargetParts.of(tiny), distilled)
    assert len(metrics["top1"]) == 4 and 0 <= metrics["expected_accepted"] <= 4


def test_position_weights_decay_along_the_block():
    assert torch.equal(dflash.position_weights(3, None, torch.device("cpu")), torch.ones(3))
    torch.testing.assert_close(
        dflash.position_weights(3, 2.0, torch.device("cpu")), torch.exp(-torch.tensor([0.0, 0.5, 1.0]))
    )  # exp(-(k-1)/2)


# ---------------------------------------------------------------------------------------------------
# the weights folder


def test_save_and_load_give_identical_drafts(tiny, trained, tmp_path):
    drafter = dflash.DFlashDrafter(tiny, trained)
    exact = dflash.load(head_io.save(trained, tiny, tmp_path / "fp32", torch.float32), tiny)
    assert exact.head.config == trained.config and torch.equal(exact.head.d2t, trained.d2t)
    for name, tensor in trained.state_dict().items():
        assert torch.equal(exact.head.state_dict()[name], tensor), name
    half = dflash.load(dflash.save(trained, tiny, tmp_path / "fp16"), tiny)
    for prompt in (PROMPT, PROMPT[:9]):
        expected = first_draft(drafter, tiny, prompt, 4)
        assert first_draft(exact, tiny, prompt, 4).tokens == expected.tokens
        assert first_draft(half, tiny, prompt, 4).tokens == expected.tokens
    assert greedy(tiny, PROMPT, 20, exact, 4) == greedy(tiny, PROMPT, 20)


def test_bad_weights_folders_are_explained(tiny, tmp_path):
    head = dflash.new_head(tiny, d2t=torch.arange(8, 40))
    with pytest.raises(DrafterWeightsError, match="no trained dflash drafter"):
        dflash.load(tmp_path / "nothing", tiny)
    folder = dflash.save(head, tiny, tmp_path / "no-weights")
    (folder / "model.safetensors").unlink()
    with pytest.raises(DrafterWeightsError, match="model.safetensors is missing"):
        dflash.load(folder, tiny)
    folder = dflash.save(head, tiny, tmp_path / "other-kind")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "kind": "eagle3"}))
    with pytest.raises(DrafterWeightsError, match="holds a eagle3 drafter"):
        dflash.load(folder, tiny)
    folder = dflash.save(head, tiny, tmp_path / "vocab")
    with pytest.raises(DrafterWeightsError, match="vocabulary 64"):
        dflash.load(folder, tiny_llama(seed=0, vocab_size=80))
    save_file({"d2t": torch.tensor([0, 999])}, str(folder / "vocab_map.safetensors"))
    with pytest.raises(DrafterWeightsError, match="outside the target's vocabulary"):
        dflash.load(folder, tiny)
    folder = dflash.save(head, tiny, tmp_path / "shape")
    config = json.loads((folder / "config.json").read_text())
    config["settings"]["num_layers"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(DrafterWeightsError, match="does not hold a usable dflash head"):
        dflash.load(folder, tiny)


# ---------------------------------------------------------------------------------------------------
# through the engine


@pytest.mark.parametrize("draft_len", [1, 3, 8])
@pytest.mark.parametrize("block_size", [8, 2])
def test_an_untrained_head_is_lossless(tiny, draft_len, block_size):
    drafter = dflash.DFlashDrafter(tiny, dflash.new_head(tiny, {"block_size": block_size}, d2t=torch.arange(1, 50)))
    result = generate(tiny, PROMPT, 40, drafter, draft_len)
    assert result.output_ids == greedy(tiny, PROMPT, 40)
    reasons = {step.stop_reason for step in result.steps if step.draft_len == draft_len}  # steps asked for D drafts
    assert reasons, "no step was asked for D drafts"
    if draft_len > block_size:  # a block holds block_size drafts
        assert reasons <= {"block-size", "eos"}
    else:
        assert "block-size" not in reasons


def test_a_trained_head_gets_drafts_accepted(tiny, trained):
    """200 steps on the target's own greedy text: drafts are accepted where an untrained head's are not."""
    prompt = random_prompts()[0]
    result = generate(tiny, prompt, 40, dflash.DFlashDrafter(tiny, trained), draft_len=4)
    untrained = generate(tiny, prompt, 40, dflash.DFlashDrafter(tiny, dflash.new_head(tiny, {"block_size": 4})), 4)
    assert result.output_ids == untrained.output_ids == greedy(tiny, prompt, 40)
    accepted = sum(step.accepted for step in result.steps)
    assert accepted >= 12 and accepted > sum(step.accepted for step in untrained.steps) + 8


def test_missing_hidden_states_stop_drafting_but_not_decoding(tiny):
    check_missing_states_stop_drafting(dflash, tiny)
    drafter = dflash.DFlashDrafter(tiny, dflash.new_head(tiny))
    session = drafter.start(PROMPT[:1], {})  # a one-token prompt has no states yet: it drafts from the anchor
    assert len(session.propose(DraftRequest(PROMPT[:1], 3, SamplingParams(), torch.Generator())).tokens) == 3


def test_the_cost_is_one_pass_spread_over_the_block(tiny):
    head = dflash.new_head(tiny, {"block_size": 4})
    cost = dflash.DFlashDrafter(tiny, head).cost()
    layer = matmul_weights(tiny.model.model.layers[0])
    assert cost.tle_per_token == pytest.approx(matmul_weights(head) / layer / 4)
    assert cost.target_tle_per_forward == pytest.approx(tiny.tle_per_forward)


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
def test_sampling_with_the_drafter_matches_the_target(sampling):
    """q is zero outside the reduced vocabulary (here 8 of 12 tokens) and exact inside it."""
    target = sampling_model()
    head = dflash.new_head(target, {"block_size": 3}, d2t=torch.tensor([0, 2, 4, 5, 6, 7, 8, 11]))
    drafter = dflash.DFlashDrafter(target, head)
    draft = first_draft(drafter, target, SAMPLING_PROMPT, 2, sampling)
    assert draft.probs.shape == (2, VOCAB) and draft.probs[:, [1, 3, 9, 10]].sum() == 0
    torch.testing.assert_close(draft.probs.sum(-1), torch.ones(2))
    counts = sampled_joint(target, drafter, sampling, draft_len=3)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


@pytest.mark.slow
def test_an_untrained_head_is_lossless_on_the_default_model(default_model):
    head = dflash.new_head(default_model)
    assert head.config.target_layers == (1, 15, 29) and head.config.draft_vocab_size == 8192
    drafter = dflash.DFlashDrafter(default_model, head)
    prompt = encode_conversation(default_model.tokenizer, ["Name three primary colours."], [])
    assert greedy(default_model, prompt, 24, drafter, draft_len=4) == greedy(default_model, prompt, 24)
    assert drafter.cost().tle_per_token * 8 == pytest.approx(2.61, abs=0.01)  # 1 layer + fc 0.28 + head 1.33
