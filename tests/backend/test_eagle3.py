"""EAGLE-3 on tiny random Llamas: shapes, the training-time test's masks and its agreement with drafting,
learning, the weights folder, and losslessness through the engine (greedy and sampling). The helpers
here are shared with test_mtp.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from backend.core.batch import BatchEngine
from backend.core.drafter import DraftRequest
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.verify import SamplingParams
from backend.drafters import eagle3, mtp
from backend.drafters.trained import DrafterWeightsError, TargetParts, TrainBatch
from backend.lab.prompts import encode_conversation
from tests.backend.test_sampling import PROMPT as SAMPLING_PROMPT
from tests.backend.test_sampling import SIGNIFICANCE, VOCAB, exact_joint, goodness_of_fit, sampled_joint
from tests.tiny import tiny_llama, tiny_tokenizer

PROMPT = [5, 9, 13, 22, 5, 9, 13, 40, 41, 5, 9, 13, 22, 7, 8]


def greedy(model, prompt: list[int], new_tokens: int, drafter=None, draft_len: int = 0) -> list[int]:
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)
    return engine.generate(prompt, drafter, GenerationSettings(new_tokens, draft_len=draft_len)).run().output_ids


@torch.no_grad()
def batch_of(model, sequences: list[list[int]], scored_from: int = 0) -> TrainBatch:
    """Equal-length sequences with every hidden state of the target (no_grad tensors: trainable on)."""
    ids = torch.tensor(sequences)  # [B, T]
    states = model.model(ids, output_hidden_states=True).hidden_states  # L+1 x [B, T, H]
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, scored_from:-1] = True
    return TrainBatch(ids, mask, dict(enumerate(states)))


def self_distilled(model, count: int = 4, new_tokens: int = 48) -> TrainBatch:
    """The target's own greedy continuations of a few prompts (it never stops: EOS is ignored)."""
    engine = SpeculativeEngine(model.model, set(), model.facts.max_context)
    prompts = [[5 + i, 9 + 2 * i, 13 + i, 22] for i in range(count)]
    sequences = [p + engine.generate(p, None, GenerationSettings(new_tokens, draft_len=0)).run().output_ids
                 for p in prompts]
    return batch_of(model, sequences, scored_from=3)


def train(module, head, model, batch: TrainBatch, steps: int, lr: float = 3e-3) -> list[float]:
    torch.manual_seed(0)
    parts = TargetParts.of(model)
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=lr)
    losses = []
    head.train()
    for _ in range(steps):
        loss, _ = module.training_loss(head, parts, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def first_draft(drafter, model, prompt: list[int], count: int, sampling: SamplingParams, seed: int = 0):
    """A fresh session's first proposal, fed the prompt's hidden states as the engine would."""
    with torch.inference_mode():
        states = model.model(torch.tensor([prompt[:-1]]), output_hidden_states=True).hidden_states
    session = drafter.start(prompt, {layer: states[layer][0] for layer in drafter.target_hidden_layers})
    return session.propose(DraftRequest(prompt, count, sampling, torch.Generator().manual_seed(seed)))


def reduced_d2t() -> torch.Tensor:
    return torch.tensor([1, 4, 5, 7, 9, 11, 13, 22, 30, 40, 41, 50, 63])  # 13 of the 64 tokens, ascending


VOCABULARIES = {"whole": None, "reduced": reduced_d2t()}


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
    layer = [f"layer.{name}.weight" for name in ("q_proj", "k_proj", "v_proj", "o_proj", "post_attention_norm",
                                                   "gate_proj", "up_proj", "down_proj")]
    # the target's embeddings are borrowed, not stored
    assert list(head.state_dict()) == ["fc.weight", "embed_norm.weight", "hidden_norm.weight", *layer, "norm.weight",
                                       "lm_head.weight"]
    counts = torch.zeros(64)
    counts[[7, 9, 30]] = torch.tensor([5.0, 3.0, 4.0])
    assert eagle3.new_head(tiny, token_counts=counts, draft_vocab_size=3).d2t.tolist() == [7, 9, 30]
    for bad in ({"layers": [1, 9]}, {"draft_vocab_size": 65}, {"depth": 2}):
        with pytest.raises(Exception, match="layers|vocabulary|unknown"):
            eagle3.new_head(tiny, **bad)


def test_shapes_on_a_training_batch(tiny):
    batch = batch_of(tiny, [PROMPT, PROMPT[::-1]])
    head = eagle3.new_head(tiny, d2t=reduced_d2t())
    outputs = eagle3.unroll(head, batch.input_ids, batch.hidden, steps=3)
    assert [tuple(h.shape) for h in outputs] == [(2, len(PROMPT), 64)] * 3
    assert head.logits(outputs[0]).shape == (2, len(PROMPT), 13)
    loss, metrics = eagle3.training_loss(head, TargetParts.of(tiny), batch, steps=3)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert set(metrics) == {f"{name}_step{j}" for name in ("loss", "acc") for j in range(3)}
    assert all(0 <= metrics[f"acc_step{j}"] <= 1 for j in range(3))


def test_training_time_test_never_sees_later_positions(tiny):
    check_causal(eagle3, tiny)


def check_causal(module, model) -> None:
    """Row t of step j reads x_0..x_{t+j+1}: changing token k leaves rows t <= k - j - 2 unchanged."""
    head = module.new_head(model)
    changed = 9
    altered = PROMPT[:changed] + [60] + PROMPT[changed + 1:]
    with torch.no_grad():
        before = eagle3.unroll(head, *_inputs(batch_of(model, [PROMPT])), steps=3)
        after = eagle3.unroll(head, *_inputs(batch_of(model, [altered])), steps=3)
    for j, (old, new) in enumerate(zip(before, after, strict=True)):
        last_unchanged = changed - j - 2
        assert torch.allclose(old[0, : last_unchanged + 1], new[0, : last_unchanged + 1], atol=1e-6)
        assert not torch.allclose(old[0, last_unchanged + 1], new[0, last_unchanged + 1], atol=1e-4)


def _inputs(batch: TrainBatch) -> tuple[torch.Tensor, dict]:
    return batch.input_ids, batch.hidden


@pytest.mark.parametrize("vocabulary", ["whole", "reduced"])
def test_training_computes_exactly_what_drafting_does(tiny, vocabulary):
    check_training_matches_drafting(eagle3, eagle3.Eagle3Drafter, tiny, VOCABULARIES[vocabulary])


def check_training_matches_drafting(module, drafter_class, model, d2t: torch.Tensor | None) -> None:
    """The draft distributions of a session's first proposal equal the training-time test's at the chain
    started where the prompt's features end, when the sequence continues with those very drafts: the
    features, token pairing, RoPE positions and attention of training and drafting are the same."""
    head = module.new_head(model, d2t=d2t).eval()
    drafter, sampling = drafter_class(model, head), SamplingParams(temperature=1.0)
    drafts = (first_draft(drafter, model, PROMPT, 4, sampling, seed) for seed in range(20))
    draft = next(d for d in drafts if len(d.tokens) == 4)  # one that did not stop at an end-of-sequence
    assert torch.allclose(draft.probs.sum(-1), torch.ones(4))
    outside = torch.ones(model.facts.vocab_size, dtype=torch.bool)
    outside[head.d2t] = False
    assert not draft.probs[:, outside].any()  # q is zero outside the draft vocabulary
    with torch.no_grad():
        outputs = eagle3.unroll(head, *_inputs(batch_of(model, [PROMPT + draft.tokens])), steps=4)
    chain_start = len(PROMPT) - 2  # the last prompt position with a feature: it pairs with the newest token
    for j, h in enumerate(outputs):
        expected = torch.softmax(head.logits(h[0, chain_start]), dim=-1)  # [Vd]
        assert torch.allclose(draft.probs[j, head.d2t], expected, atol=1e-5)


def test_a_few_optimizer_steps_reduce_the_loss(tiny):
    batch = self_distilled(tiny, count=2, new_tokens=24)
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


def rounded_head(module, model, **settings):
    """A head whose weights survive fp16 storage exactly, so a round trip must give identical drafts."""
    head = module.new_head(model, **settings)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.copy_(parameter.half().float())
    return head.eval()


def test_save_and_load_give_identical_drafts(tiny, tmp_path):
    check_round_trip(eagle3, eagle3.Eagle3Drafter, tiny, tmp_path)


def check_round_trip(module, drafter_class, model, folder) -> None:
    head = rounded_head(module, model, d2t=reduced_d2t())
    module.save(head, model, folder)
    loaded = drafter_class.load(folder, model)
    assert loaded.head.config == head.config and torch.equal(loaded.head.d2t, head.d2t)
    for sampling in (SamplingParams(), SamplingParams(temperature=0.8, top_k=20)):
        want = first_draft(drafter_class(model, head), model, PROMPT, 5, sampling)
        got = first_draft(loaded, model, PROMPT, 5, sampling)
        assert got.tokens == want.tokens and got.confidence == want.confidence
        assert (got.probs is None and want.probs is None) or torch.equal(got.probs, want.probs)


def test_a_whole_vocabulary_head_is_saved_without_a_vocabulary_map(tiny, tmp_path):
    eagle3.save(eagle3.new_head(tiny), tiny, tmp_path)
    assert not (tmp_path / "vocab_map.safetensors").exists()
    assert torch.equal(eagle3.Eagle3Drafter.load(tmp_path, tiny).head.d2t, torch.arange(64))


def _edit_config(folder, **settings) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["settings"].update(settings)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
    (lambda f: save_file({"d2t": torch.tensor([3, 64])}, str(f / "vocab_map.safetensors")), "outside the target"),
    (lambda f: (f / "vocab_map.safetensors").unlink(), "vocab_map.safetensors is missing"),
    (lambda f: _edit_config(f, layers=[1, 2]), "usable eagle3 head"),
    (lambda f: _edit_config(f, draft_vocab_size=12), "vocabulary map has 13 tokens"),
    (lambda f: _edit_config(f, heads=3), "unknown eagle3 settings: heads"),
])
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
    check_lossless(eagle3, eagle3.Eagle3Drafter, tiny, draft_len, VOCABULARIES[vocabulary])


def check_lossless(module, drafter_class, model, draft_len: int, d2t: torch.Tensor | None) -> None:
    drafter = drafter_class(model, module.new_head(model, d2t=d2t))
    result = SpeculativeEngine(model.model, model.eos_token_ids, 512).generate(
        PROMPT, drafter, GenerationSettings(40, draft_len=draft_len)).run()
    assert result.output_ids == greedy(model, PROMPT, 40)
    assert all(step.drafted for step in result.steps[:-1])  # it drafted at every step (the last may have no room)


def test_batched_rows_are_lossless_and_draft(tiny):
    check_batched(eagle3, eagle3.Eagle3Drafter, tiny)


def check_batched(module, drafter_class, model) -> None:
    """Each row of a batch keeps its own session fed with its own rows' hidden states."""
    prompts = [PROMPT, [7, 8], [12], [50, 51, 50, 51, 52]]
    engine = SpeculativeEngine(model.model, set(), 512)
    drafter = drafter_class(model, module.new_head(model, d2t=reduced_d2t()))
    result = BatchEngine(engine).generate(prompts, drafter, GenerationSettings(30, draft_len=3))
    singles = [engine.generate(p, None, GenerationSettings(30, draft_len=0)).run().output_ids for p in prompts]
    assert [row.output_ids for row in result.rows] == singles
    assert all(all(step.drafted for step in row.steps[1:-1]) for row in result.rows)


def test_a_one_token_prompt_drafts_from_the_second_step(tiny):
    drafter = eagle3.Eagle3Drafter(tiny, eagle3.new_head(tiny))
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, 512)
    result = engine.generate([5], drafter, GenerationSettings(12, draft_len=3)).run()
    assert result.output_ids == greedy(tiny, [5], 12)
    assert result.steps[0].drafted == [] and len(result.steps[1].drafted) == 3


def test_missing_hidden_states_stop_drafting_but_not_decoding(tiny):
    drafter = eagle3.Eagle3Drafter(tiny, eagle3.new_head(tiny))
    session = drafter.start(PROMPT, {})  # hidden states lost (the prompt had 14 feature rows)
    draft = session.propose(DraftRequest(PROMPT, 3, SamplingParams(), torch.Generator()))
    assert draft.tokens == [] and draft.stop_reason == "no-features"


def test_a_trained_head_gets_drafts_accepted(tiny):
    check_learns_to_draft(eagle3, eagle3.Eagle3Drafter, tiny)


def check_learns_to_draft(module, drafter_class, model) -> None:
    """~200 steps on the target's own greedy text: only a head fed the right positions' features learns."""
    head = module.new_head(model)
    losses = train(module, head, model, self_distilled(model), steps=200)
    assert losses[-1] < losses[0]
    prompt = [7, 11, 30, 22]
    result = SpeculativeEngine(model.model, set(), 512).generate(
        prompt, drafter_class(model, head.eval()), GenerationSettings(40, draft_len=4)).run()
    assert result.output_ids == greedy(model, prompt, 40)
    assert sum(step.accepted for step in result.steps) >= 15  # an untrained head gets about 2


def sampling_model():
    """The target of test_sampling.py: 12 tokens, peaked enough to give a powerful chi-square test."""
    return tiny_llama(seed=3, vocab_size=VOCAB, layers=2, hidden=32, heads=2, kv_heads=1, init_scale=0.3,
                      tokenizer=tiny_tokenizer(VOCAB))


REDUCED_12 = torch.tensor([2, 4, 5, 6, 7, 9, 11])  # 7 of the sampling target's 12 tokens


@pytest.mark.parametrize("sampling, d2t", [
    (SamplingParams(temperature=1.0), REDUCED_12),
    (SamplingParams(temperature=0.7, top_k=6, top_p=0.9), None),
], ids=["T1-reduced-vocab", "T0.7-topk6-topp0.9"])
def test_sampling_with_the_drafter_matches_the_target(sampling, d2t):
    check_sampling(eagle3, eagle3.Eagle3Drafter, sampling_model(), sampling, d2t)


def check_sampling(module, drafter_class, model, sampling: SamplingParams, d2t: torch.Tensor | None) -> None:
    """The joint distribution of the first two tokens, drafts verified by rejection sampling, is the target's."""
    drafter = drafter_class(model, module.new_head(model, d2t=d2t))
    assert first_draft(drafter, model, SAMPLING_PROMPT, 2, sampling).probs is not None  # q is real, not one-hot
    counts = sampled_joint(model, drafter, sampling, draft_len=3)
    assert goodness_of_fit(counts, exact_joint(model, sampling)) > SIGNIFICANCE


@pytest.mark.slow
def test_untrained_head_is_lossless_on_the_default_model(default_model):
    head = eagle3.new_head(default_model)
    assert head.config.layers == (2, 15, 27) and head.config.draft_vocab_size == 8192
    drafter = eagle3.Eagle3Drafter(default_model, head)
    prompt = encode_conversation(default_model.tokenizer, ["Name three primary colours."], [])
    assert greedy(default_model, prompt, 24, drafter, draft_len=4) == greedy(default_model, prompt, 24)
    assert drafter.cost().tle_per_token == pytest.approx(2.77, abs=0.01)
