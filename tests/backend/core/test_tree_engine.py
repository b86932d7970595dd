"""The engine decoding with token trees on a tiny Llama: n-gram trees give plain greedy's output
token for token, really branch and sample too, a drafter's hidden states follow the kept path, and
what trees do not support yet is refused in one sentence."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.core.target_passes import EagerPasses
from backend.core.tree_shape import children, depths
from backend.core.verify import SamplingParams
from backend.drafters import build_drafter
from tests.helpers.scripted import PROMPT
from tests.helpers.trees import BRANCHING, later_sibling_accepted


def engine_for(model) -> SpeculativeEngine:
    return SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)


def run(model, drafter, prompt, max_new_tokens=60, **settings):
    return engine_for(model).generate(prompt, drafter, GenerationSettings(max_new_tokens, **settings)).run()


@pytest.mark.parametrize("prompt", [BRANCHING * 2, PROMPT], ids=["branching", "repeats"])
@pytest.mark.parametrize(("budget", "topk", "draft_len"), [(4, 2, 3), (8, 4, 4), (16, 4, 8)])
def test_ngram_tree_output_equals_plain_greedy(tiny, prompt, budget, topk, draft_len):
    plain = run(tiny, None, prompt, draft_len=0)
    result = run(tiny, build_drafter("ngram", tiny), prompt, draft_len=draft_len, tree_budget=budget, tree_topk=topk)
    assert result.output_ids == plain.output_ids
    trees = [step for step in result.steps if step.parents is not None]
    assert trees, "no step drafted a tree"
    for step in trees:
        assert len(step.drafted) <= budget and step.accepted == len(step.accepted_path)
        assert max(len(below) for below in children(step.parents)) <= topk
        kept = [step.drafted[node] for node in step.accepted_path]
        assert step.emitted == [*kept, step.target_token][: len(step.emitted)]
        assert len(step.target_probs) == len(step.drafted)


@pytest.mark.parametrize("prompt", [BRANCHING * 2, PROMPT], ids=["branching", "repeats"])
def test_ngram_trees_under_auto_equal_plain_greedy(tiny, prompt):
    """`auto` caps each draft's depth and may keep to chains (its choices follow measured step times): the
    output is plain greedy's, and every verified draft, tree or chain, keeps to the budget and the cap."""
    plain = run(tiny, None, prompt, draft_len=0)
    result = run(tiny, build_drafter("ngram", tiny), prompt, draft_len="auto", tree_budget=16, tree_topk=2)
    assert result.output_ids == plain.output_ids
    drafting = [step for step in result.steps if step.drafted]
    assert drafting, "auto verified no draft"  # its first draft is always tried
    for step in drafting:
        tree = step.parents is not None
        depth = max(depths(step.parents)) if tree else len(step.drafted)
        assert len(step.drafted) <= 16 and 0 < depth <= step.draft_len
        assert not tree or max(len(below) for below in children(step.parents)) <= 2
        kept = [step.drafted[node] for node in (step.accepted_path if tree else range(step.accepted))]
        assert step.emitted == [*kept, step.target_token][: len(step.emitted)]


def test_some_tree_step_accepts_a_later_sibling(tiny):
    result = run(tiny, build_drafter("ngram", tiny), BRANCHING * 2, draft_len=4, tree_budget=8)
    assert any(later_sibling_accepted(step) for step in result.steps if step.parents is not None)
    chain = run(tiny, build_drafter("ngram", tiny), BRANCHING * 2, draft_len=4)
    assert len(result.steps) < len(chain.steps)  # the branches save passes on this prompt


class TruthBranchDrafter:
    """Proposes a tree whose first root child is wrong and whose second starts the true greedy
    continuation, two deep; it asks for a hidden layer and records what each step hands it."""

    name = "truth-branch"
    target_hidden_layers = (2,)
    free_to_propose = False

    def __init__(self, reference: list[int], prompt_len: int) -> None:
        self.reference, self.prompt_len = reference, prompt_len
        self.seen: list[tuple[int, torch.Tensor]] = []  # (position of the first committed token, rows)

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        self.position = len(prompt)
        return self

    def propose(self, request: DraftRequest) -> Draft:
        truth = self.reference[len(request.tokens) - self.prompt_len :][:2]
        wrong = (truth[0] + 1) % 60 + 4
        if len(truth) < 2:
            return Draft([wrong], parents=[-1])
        return Draft([wrong, truth[0], wrong, truth[1]], parents=[-1, -1, 0, 1])

    def observe(self, outcome: StepOutcome) -> None:
        self.seen.append((self.position, outcome.hidden[2]))
        self.position += len(outcome.committed)

    def close(self) -> None:
        pass


def test_hidden_states_follow_the_kept_path(tiny):
    plain = run(tiny, None, PROMPT, max_new_tokens=20, draft_len=0).output_ids
    drafter = TruthBranchDrafter(plain, len(PROMPT))
    result = run(tiny, drafter, PROMPT, max_new_tokens=20, draft_len=2, tree_budget=4)
    assert result.output_ids == plain
    assert any(step.accepted_path == [1, 3] for step in result.steps)
    with torch.inference_mode():
        full = tiny.model(torch.tensor([PROMPT + plain]), output_hidden_states=True).hidden_states[2][0]  # [L, H]
    for position, rows in drafter.seen:  # row i predicted the token at position + i
        torch.testing.assert_close(rows, full[position - 1 : position - 1 + len(rows)], atol=1e-4, rtol=1e-4)


def one_sentence(message: str) -> bool:
    return message.count(". ") == 0 and "\n" not in message


def test_ngram_trees_sample_reproducibly(tiny):
    drafter = build_drafter("ngram", tiny)
    runs = [
        run(tiny, drafter, BRANCHING * 2, 30, draft_len=4, sampling=SamplingParams(temperature=0.7), tree_budget=8)
        for _ in range(2)
    ]
    assert runs[0].output_ids == runs[1].output_ids  # one seed, one output
    trees = [step for step in runs[0].steps if step.parents is not None]
    assert trees, "no step drafted a tree"
    for step in trees:
        kept = [step.drafted[node] for node in step.accepted_path]
        assert step.emitted == [*kept, step.target_token][: len(step.emitted)]
        assert len(step.target_probs) == len(step.drafted) and 0 < step.target_token_prob <= 1


@pytest.mark.parametrize("budget", [-1])
def test_a_negative_tree_budget_is_refused(tiny, budget):
    with pytest.raises(SpecScopeError, match="tree budget must be >= 0"):
        engine_for(tiny).generate(PROMPT, None, GenerationSettings(10, 4, tree_budget=budget))


def test_attention_without_a_4d_mask_is_refused():
    model = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    with pytest.raises(SpecScopeError, match="sdpa or eager attention") as refused:
        EagerPasses(model).check_tree()
    assert one_sentence(str(refused.value))


def test_sliding_window_models_are_refused():
    config = MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
    )
    with pytest.raises(SpecScopeError, match="sliding-window") as refused:
        EagerPasses(MistralForCausalLM(config).eval()).check_tree()
    assert one_sentence(str(refused.value))


def test_auto_learns_a_trees_depth_not_its_node_count(tiny, monkeypatch):
    """`auto` caps a tree's depth, so it must hear the depth it verified: a 12-node tree whose kept path
    reached the deepest level accepted everything it could (the cap grows), not 3 of 12."""
    from backend.core.policy import FixedDraftLength

    heard: list[tuple[int, int]] = []
    observe = FixedDraftLength.observe

    def spy(self, step):
        heard.append((step.verified, step.accepted))
        return observe(self, step)

    monkeypatch.setattr(FixedDraftLength, "observe", spy)  # every policy hears the same (auto acts on it)
    result = run(tiny, build_drafter("ngram", tiny), BRANCHING * 2, draft_len=4, tree_budget=12)
    trees = [(index, step) for index, step in enumerate(result.steps) if step.parents is not None]
    assert trees
    for index, step in trees:
        assert heard[index] == (max(depths(step.parents)), step.accepted)
