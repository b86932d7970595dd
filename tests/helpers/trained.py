"""Helpers for the trained drafters' tests (EAGLE-3, MTP, DFlash, DSpark, the training loop), in the spirit of
tiny.py: training batches read from a tiny target, a few optimiser steps through a kind's own interface,
a session's first proposal, and the checks every kind must pass (lossless, exact sampling, round trip...).

A "kind" is a module with the trained-kind interface (KIND, new_head, training_loss, drafter, save, load).
"""

from __future__ import annotations

from types import ModuleType

import torch

from backend.core.batch import BatchEngine
from backend.core.drafter import DraftRequest
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.verify import SamplingParams
from backend.drafters.feature_chain import unroll
from backend.drafters.trained import TargetParts, TrainBatch
from backend.training.loop import TrainSettings
from tests.helpers.sampling import PROMPT as SAMPLING_PROMPT
from tests.helpers.sampling import SIGNIFICANCE, exact_joint, goodness_of_fit, sampled_joint

PROMPT = [5, 9, 13, 22, 5, 9, 13, 40, 41, 5, 9, 13, 22, 7, 8]
GREEDY = SamplingParams()
REDUCED_12 = torch.tensor([2, 4, 5, 6, 7, 9, 11])  # 7 of the sampling target's 12 tokens


def small_settings(steps: int) -> TrainSettings:
    """Training settings for a tiny target: `steps` steps of 4 windows of 32 tokens, validated at the end."""
    return TrainSettings(
        tokens=steps * 4 * 32,
        window=32,
        rows=4,
        learning_rate=3e-3,
        warmup_steps=2,
        validate_every=steps,
        checkpoint_every=10,
        validation_prompts=2,
        validation_new_tokens=16,
    )


def generate(model, prompt: list[int], new_tokens: int, drafter=None, draft_len: int = 0):
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)
    return engine.generate(prompt, drafter, GenerationSettings(new_tokens, draft_len=draft_len)).run()


def greedy(model, prompt: list[int], new_tokens: int, drafter=None, draft_len: int = 0) -> list[int]:
    return generate(model, prompt, new_tokens, drafter, draft_len).output_ids


@torch.no_grad()
def batch_of(model, sequences: list[list[int]], scored_from: int = 0) -> TrainBatch:
    """Equal-length sequences with every hidden state of the target, as the training data carries them;
    positions scored_from..T-2 are scored (the last has no next token)."""
    ids = torch.tensor(sequences)  # [B, T]
    states = model.model(ids, output_hidden_states=True).hidden_states  # L+1 x [B, T, H]
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, scored_from:-1] = True
    return TrainBatch(ids, mask, dict(enumerate(states)))


def short_prompts(count: int = 4) -> list[list[int]]:
    return [[5 + i, 9 + 2 * i, 13 + i, 22] for i in range(count)]


def random_prompts(count: int = 12) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(4, 64, (8,), generator=generator).tolist() for _ in range(count)]


def self_distilled(model, prompts: list[list[int]], new_tokens: int) -> TrainBatch:
    """The target's own greedy continuations of equally long prompts (EOS ignored, so rows are equally long),
    scored from the prompt's last position on."""
    engine = SpeculativeEngine(model.model, set(), model.facts.max_context)
    sequences = [
        p + engine.generate(p, None, GenerationSettings(new_tokens, draft_len=0)).run().output_ids for p in prompts
    ]
    return batch_of(model, sequences, scored_from=len(prompts[0]) - 1)


def train(
    kind: ModuleType, head, model, batch: TrainBatch, steps: int, lr: float = 3e-3, fixed_anchors: bool = False
) -> list[float]:
    """`steps` AdamW steps of kind.training_loss, as the training loop takes them; the losses. Block kinds draw
    their anchors from torch's global generator: seeded once, or before every step with fixed_anchors."""
    torch.manual_seed(0)
    parts = TargetParts.of(model)
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    losses = []
    head.train()
    for _ in range(steps):
        if fixed_anchors:
            torch.manual_seed(0)
        loss, _ = kind.training_loss(head, parts, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def first_draft(
    drafter,
    model,
    prompt: list[int],
    count: int,
    sampling: SamplingParams = GREEDY,
    seed: int = 0,
    max_nodes: int = 0,
    branching: int = 1,
):
    """A fresh session's first proposal (a tree of up to `max_nodes` nodes where it is not 0), fed the prompt's
    hidden states as the engine would."""
    with torch.inference_mode():
        states = model.model(torch.tensor([prompt[:-1]]), output_hidden_states=True).hidden_states
    session = drafter.start(prompt, {layer: states[layer][0] for layer in drafter.target_hidden_layers})
    generator = torch.Generator().manual_seed(seed)
    return session.propose(DraftRequest(prompt, count, sampling, generator, max_nodes, branching))


def count_calls(module: torch.nn.Module) -> list[int]:
    calls = [0]
    module.register_forward_hook(lambda *args: calls.__setitem__(0, calls[0] + 1))
    return calls


def reduced_d2t() -> torch.Tensor:
    return torch.tensor([1, 4, 5, 7, 9, 11, 13, 22, 30, 40, 41, 50, 63])  # 13 of the 64 tokens, ascending


VOCABULARIES = {"whole": None, "reduced": reduced_d2t()}


def rounded_head(kind: ModuleType, model, d2t: torch.Tensor | None = None):
    """A head whose weights survive fp16 storage exactly, so a round trip must give identical drafts."""
    head = kind.new_head(model, d2t=d2t)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.copy_(parameter.half().float())
    return head.eval()


# --- checks every chain kind (EAGLE-3, MTP) passes ------------------------------------------------------


def check_causal(kind: ModuleType, model) -> None:
    """Row t of step j reads x_0..x_{t+j+1}: changing token k leaves rows t <= k - j - 2 unchanged."""
    head = kind.new_head(model)
    changed = 9
    altered = PROMPT[:changed] + [60] + PROMPT[changed + 1 :]
    with torch.no_grad():
        before = unroll(head, *_inputs(batch_of(model, [PROMPT])), steps=3)
        after = unroll(head, *_inputs(batch_of(model, [altered])), steps=3)
    for j, (old, new) in enumerate(zip(before, after, strict=True)):
        last_unchanged = changed - j - 2
        assert torch.allclose(old[0, : last_unchanged + 1], new[0, : last_unchanged + 1], atol=1e-6)
        assert not torch.allclose(old[0, last_unchanged + 1], new[0, last_unchanged + 1], atol=1e-4)


def _inputs(batch: TrainBatch) -> tuple[torch.Tensor, dict]:
    return batch.input_ids, batch.hidden


def check_training_matches_drafting(kind: ModuleType, model, d2t: torch.Tensor | None) -> None:
    """The draft distributions of a session's first proposal equal the training-time test's at the chain
    started where the prompt's features end, when the sequence continues with those very drafts: the
    features, token pairing, RoPE positions and attention of training and drafting are the same."""
    head = kind.new_head(model, d2t=d2t).eval()
    drafter, sampling = kind.drafter(model, head), SamplingParams(temperature=1.0)
    drafts = (first_draft(drafter, model, PROMPT, 4, sampling, seed) for seed in range(20))
    draft = next(d for d in drafts if len(d.tokens) == 4)  # one that did not stop at an end-of-sequence
    assert torch.allclose(draft.probs.sum(-1), torch.ones(4))
    outside = torch.ones(model.facts.vocab_size, dtype=torch.bool)
    outside[head.d2t] = False
    assert not draft.probs[:, outside].any()  # q is zero outside the draft vocabulary
    with torch.no_grad():
        outputs = unroll(head, *_inputs(batch_of(model, [PROMPT + draft.tokens])), steps=4)
    chain_start = len(PROMPT) - 2  # the last prompt position with a feature: it pairs with the newest token
    for j, h in enumerate(outputs):
        expected = torch.softmax(head.logits(h[0, chain_start]), dim=-1)  # [Vd]
        assert torch.allclose(draft.probs[j, head.d2t], expected, atol=1e-5)


def check_learns_to_draft(kind: ModuleType, model) -> None:
    """~200 steps on the target's own greedy text: only a head fed the right positions' features learns."""
    head = kind.new_head(model)
    losses = train(kind, head, model, self_distilled(model, short_prompts(), 48), steps=200)
    assert losses[-1] < losses[0]
    prompt = [7, 11, 30, 22]
    result = (
        SpeculativeEngine(model.model, set(), 512)
        .generate(prompt, kind.drafter(model, head.eval()), GenerationSettings(40, draft_len=4))
        .run()
    )
    assert result.output_ids == greedy(model, prompt, 40)
    assert sum(step.accepted for step in result.steps) >= 15  # an untrained head gets about 2


# --- checks every trained kind passes ---------------------------------------------------------------------


def check_round_trip(kind: ModuleType, model, folder) -> None:
    """Saved (fp16) and loaded, a head with fp16-exact weights drafts exactly as before, greedy and sampling."""
    head = rounded_head(kind, model, d2t=reduced_d2t())
    kind.save(head, model, folder)
    loaded = kind.load(folder, model)
    assert loaded.head.config == head.config and torch.equal(loaded.head.d2t, head.d2t)
    for sampling in (SamplingParams(), SamplingParams(temperature=0.8, top_k=20)):
        want = first_draft(kind.drafter(model, head), model, PROMPT, 5, sampling)
        got = first_draft(loaded, model, PROMPT, 5, sampling)
        assert got.tokens == want.tokens and got.confidence == want.confidence
        if sampling.greedy:  # greedy drafts carry no distributions
            assert got.probs is None and want.probs is None
        else:
            assert torch.equal(got.probs, want.probs)


def check_lossless(kind: ModuleType, model, draft_len: int, d2t: torch.Tensor | None) -> None:
    result = generate(model, PROMPT, 40, kind.drafter(model, kind.new_head(model, d2t=d2t)), draft_len)
    assert result.output_ids == greedy(model, PROMPT, 40)
    assert all(step.drafted for step in result.steps[:-1])  # it drafted at every step (the last may have no room)


def check_batched(kind: ModuleType, model) -> None:
    """Each row of a batch keeps its own session fed with its own rows' hidden states."""
    prompts = [PROMPT, [7, 8], [12], [50, 51, 50, 51, 52]]
    engine = SpeculativeEngine(model.model, set(), 512)
    drafter = kind.drafter(model, kind.new_head(model, d2t=reduced_d2t()))
    result = BatchEngine(engine).generate(prompts, drafter, GenerationSettings(30, draft_len=3))
    singles = [engine.generate(p, None, GenerationSettings(30, draft_len=0)).run().output_ids for p in prompts]
    assert [row.output_ids for row in result.rows] == singles
    assert all(all(step.drafted for step in row.steps[1:-1]) for row in result.rows)


def check_missing_states_stop_drafting(kind: ModuleType, model) -> None:
    """The one rule: a session that lost the target's hidden states proposes nothing ("no-features"), and
    decoding goes on losslessly."""
    drafter = kind.drafter(model, kind.new_head(model))
    session = drafter.start(PROMPT, {})  # hidden states lost (the prompt had 14 positions)
    draft = session.propose(DraftRequest(PROMPT, 3, GREEDY, torch.Generator()))
    assert draft.tokens == [] and draft.stop_reason == "no-features"


def check_sampling(kind: ModuleType, model, sampling: SamplingParams, d2t: torch.Tensor | None) -> None:
    """The joint distribution of the first two tokens, drafts verified by rejection sampling, is the target's."""
    drafter = kind.drafter(model, kind.new_head(model, d2t=d2t))
    assert first_draft(drafter, model, SAMPLING_PROMPT, 2, sampling).probs is not None  # q is real, not one-hot
    counts = sampled_joint(model, drafter, sampling, draft_len=3)
    assert goodness_of_fit(counts, exact_joint(model, sampling)) > SIGNIFICANCE
