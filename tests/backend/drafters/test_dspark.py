"""DSpark on tiny random Llamas: the DFlash backbone still drafts a block in one pass, the Markov head
corrects it left to right, the confidence head cuts drafts short (reported as "low-confidence"),
learning, the weights folder, and losslessness through the engine (greedy and sampling)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from backend.core.models import matmul_weights
from backend.drafters import dflash, dspark, head_io
from backend.drafters.trained import DrafterWeightsError, TargetParts
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
from tests.helpers.trained import (
    PROMPT,
    check_missing_states_stop_drafting,
    count_calls,
    first_draft,
    generate,
    greedy,
    random_prompts,
    self_distilled,
    train,
)


def with_markov_weights(head: dspark.DSparkHead, seed: int = 0, scale: float = 3.0) -> dspark.DSparkHead:
    """Random Markov weights, so drafts depend on the previously drafted token (untrained W_2 is zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for linear in (head.markov_in, head.markov_out):
            noise = torch.randn(linear.weight.shape, generator=generator)
            linear.weight.copy_(noise * scale / linear.in_features**0.5)
    return head


def with_confidence(head: dspark.DSparkHead, value: float) -> dspark.DSparkHead:
    """A confidence head that says `value` everywhere."""
    with torch.no_grad():
        head.confidence.weight.zero_()
        head.confidence.bias.fill_(math.log(value / (1 - value)))
    return head


@pytest.fixture(scope="module")
def distilled(tiny):
    return self_distilled(tiny, random_prompts(), 40)


@pytest.fixture(scope="module")
def trained(tiny, distilled):
    head = dspark.new_head(tiny, {"block_size": 4})
    train(dspark, head, tiny, distilled, steps=200)
    return head


def test_an_untrained_head_drafts_as_its_backbone(tiny):
    head = dspark.new_head(tiny, {"block_size": 4, "markov_rank": 8})
    assert isinstance(head.backbone, dflash.DFlashHead) and head.config.markov_rank == 8
    assert head.config.threshold == 0.3 and head.markov_out.weight.shape == (64, 8)
    backbone = dflash.DFlashDrafter(tiny, head.backbone)
    assert (
        first_draft(dspark.DSparkDrafter(tiny, head), tiny, PROMPT, 4).tokens
        == first_draft(backbone, tiny, PROMPT, 4).tokens
    )


def test_the_backbone_runs_once_per_proposal_and_the_markov_head_changes_drafts(tiny):
    head = with_markov_weights(dspark.new_head(tiny))
    calls = count_calls(head.backbone)
    result = generate(tiny, PROMPT, 30, dspark.DSparkDrafter(tiny, head), draft_len=3)
    assert calls[0] == sum(1 for step in result.steps if step.draft_len > 0) > 5
    backbone_only = first_draft(dflash.DFlashDrafter(tiny, head.backbone), tiny, PROMPT, 8).tokens
    assert first_draft(dspark.DSparkDrafter(tiny, head), tiny, PROMPT, 8).tokens != backbone_only


def test_the_confidence_cut_shortens_drafts_and_says_so(tiny):
    head = with_confidence(dspark.new_head(tiny), 0.8)
    draft = first_draft(dspark.DSparkDrafter(tiny, head, threshold=0.5), tiny, PROMPT, 8)
    assert len(draft.tokens) == 3 and draft.stop_reason == "low-confidence"  # 0.8, 0.64, 0.512, then 0.41
    assert len(first_draft(dspark.DSparkDrafter(tiny, head, threshold=0.0), tiny, PROMPT, 8).tokens) == 8
    never = dspark.DSparkDrafter(tiny, dspark.new_head(tiny), threshold=1.0)
    result = generate(tiny, PROMPT, 20, never, draft_len=4)
    assert result.output_ids == greedy(tiny, PROMPT, 20)
    assert all(
        step.drafted == [] and step.stop_reason == "low-confidence" for step in result.steps if step.draft_len > 0
    )


@pytest.mark.parametrize("max_nodes", [0, 8], ids=["chain", "tree"])
def test_a_draft_cut_before_its_first_token_never_reads_the_lm_head(tiny, monkeypatch, max_nodes):
    head = dspark.new_head(tiny)
    rows: list[int] = []
    logits = head.backbone.logits
    monkeypatch.setattr(head.backbone, "logits", lambda hidden: rows.append(hidden.shape[0]) or logits(hidden))

    def propose(threshold: float):
        return first_draft(
            dspark.DSparkDrafter(tiny, head, threshold=threshold), tiny, PROMPT, 4, max_nodes=max_nodes, branching=2
        )

    assert propose(1.0).tokens == []
    assert rows == []
    assert len(propose(0.0).tokens) == (max_nodes or 4)
    assert rows == [4]  # one read for the whole block


def test_training_reduces_every_part_of_the_loss(tiny, distilled):
    head = dspark.new_head(tiny, {"block_size": 4})
    parts = TargetParts.of(tiny)
    torch.manual_seed(0)  # the anchors: the same blocks before and after
    _, before = dspark.training_loss(head, parts, distilled)
    losses = train(dspark, head, tiny, distilled, steps=30, fixed_anchors=True)
    torch.manual_seed(0)
    _, after = dspark.training_loss(head, parts, distilled)
    assert losses[-1] < 0.5 * losses[0]
    for part in ("backbone_kl", "markov_kl", "confidence_bce"):
        assert after[part] < before[part], part
    assert len(after["top1_markov"]) == 4


def test_a_trained_head_gets_drafts_accepted(tiny, trained):
    prompt = random_prompts()[0]
    result = generate(tiny, prompt, 40, dspark.DSparkDrafter(tiny, trained), draft_len=4)
    assert result.output_ids == greedy(tiny, prompt, 40)
    assert sum(step.accepted for step in result.steps) >= 12


def test_save_and_load_give_identical_drafts(tiny, trained, tmp_path):
    folder = head_io.save(trained, tiny, tmp_path / "dspark", torch.float32)
    loaded = dspark.load(folder, tiny, threshold=0.1)
    assert loaded.head.config == trained.config and loaded.threshold == 0.1
    for name, tensor in trained.state_dict().items():
        assert torch.equal(loaded.head.state_dict()[name], tensor), name
    drafter = dspark.DSparkDrafter(tiny, trained, threshold=0.1)
    for prompt in (PROMPT, PROMPT[:9]):
        assert first_draft(loaded, tiny, prompt, 4).tokens == first_draft(drafter, tiny, prompt, 4).tokens
    with pytest.raises(DrafterWeightsError, match="holds a dspark drafter, not dflash"):
        dflash.load(folder, tiny)
    with pytest.raises(DrafterWeightsError, match="holds a dflash drafter, not dspark"):
        dspark.load(dflash.save(dflash.new_head(tiny), tiny, tmp_path / "dflash"), tiny)


def test_missing_hidden_states_stop_drafting_but_not_decoding(tiny):
    check_missing_states_stop_drafting(dspark, tiny)


def test_folders_from_before_the_shared_draft_layer_still_load(tiny, trained, tmp_path):
    """DFlash layers once named their parameters q, k, v, o, attn_norm, mlp_norm, gate, up, down; such
    folders (the shipped ones among them) load to the same head."""
    from safetensors.torch import load_file, save_file

    folder = head_io.save(trained, tiny, tmp_path / "old", torch.float32)
    renamed = {new: old for old, new in dflash.LEGACY_LAYER_NAMES.items()}
    state = {
        re.sub(r"(layers\.\d+\.)(\w+)\.", lambda m: f"{m[1]}{renamed.get(m[2], m[2])}.", name): tensor
        for name, tensor in load_file(str(folder / "model.safetensors")).items()
    }
    assert "backbone.layers.0.attn_norm.weight" in state and "backbone.layers.0.q_norm.weight" in state
    save_file(state, str(folder / "model.safetensors"))
    loaded = dspark.load(folder, tiny).head
    for name, tensor in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("draft_len", [1, 3, 8])
def test_an_untrained_head_is_lossless(tiny, draft_len):
    head = with_markov_weights(dspark.new_head(tiny, d2t=torch.arange(1, 50)))
    assert greedy(tiny, PROMPT, 40, dspark.DSparkDrafter(tiny, head), draft_len) == greedy(tiny, PROMPT, 40)


def test_the_cost_adds_the_markov_and_confidence_heads_per_token(tiny):
    head = dspark.new_head(tiny, {"block_size": 4, "markov_rank": 8})
    layer = matmul_weights(tiny.model.model.layers[0])
    per_token = (64 * 8 + 8 * 64 + (64 + 8)) / layer
    expected = matmul_weights(head.backbone) / layer / 4 + per_token
    assert dspark.DSparkDrafter(tiny, head).cost().tle_per_token == pytest.approx(expected)


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
def test_sampling_with_the_drafter_matches_the_target(sampling):
    """Tokens drawn one by one from Markov-corrected rows, some drafts cut by confidence: still exact."""
    target = sampling_model()
    head = with_markov_weights(dspark.new_head(target, {"block_size": 3}, d2t=torch.tensor([0, 2, 4, 5, 6, 7, 8, 11])))
    drafter = dspark.DSparkDrafter(target, with_confidence(head, 0.7), threshold=0.45)  # 0.7, then 0.49, then cut
    draft = first_draft(drafter, target, SAMPLING_PROMPT, 3, sampling)
    assert draft.stop_reason == "low-confidence" and draft.probs.shape == (2, VOCAB)
    counts = sampled_joint(target, drafter, sampling, draft_len=3)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


@pytest.mark.slow
def test_an_untrained_head_is_lossless_on_the_default_model(default_model):
    from backend.lab.prompts import encode_conversation

    drafter = dspark.DSparkDrafter(default_model, with_markov_weights(dspark.new_head(default_model), scale=1.0))
    prompt = encode_conversation(default_model.tokenizer, ["Name three primary colours."], [])
    assert greedy(default_model, prompt, 24, drafter, draft_len=4) == greedy(default_model, prompt, 24)
