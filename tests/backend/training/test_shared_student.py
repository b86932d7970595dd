"""The shared-embedding student (student.py's wide design, drafters/shared_student.py): it starts as the
chosen target layers, borrows the target's embedding and LM head instead of storing them, saves a folder of
its own tensors within the size budget, reloads for its own target only, drafts losslessly (over a reduced
draft vocabulary too), and trains without touching the target."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open
from torch import nn

from backend.core.errors import SpecScopeError
from backend.core.metrics import acceptance_stats
from backend.drafters import SHIPPED_DIR, STUDENT_MARKER, DrafterOptions, build_drafter
from backend.drafters.head_precision import NarrowLinear
from backend.drafters.shared_student import DraftVocabularyHead, shares_target
from backend.training import student
from backend.training.loop import CHECKPOINT, train
from tests.helpers.tiny import tiny_llama
from tests.helpers.trained import PROMPT, generate, greedy, small_settings

SHARED = {"share_target_embedding": True}
MB = 1_000_000


def stored_weights(config, num_layers: int) -> int:
    """A shared-embedding Llama student's stored weights: per layer the q, k, v, o projections
    (2 H d (n_q + n_kv)), the gated MLP (3 H I) and two norms (2 H); then the final norm (H)."""
    hidden, head_dim = config.hidden_size, config.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    layer = 2 * hidden * head_dim * (heads + kv_heads) + 3 * hidden * config.intermediate_size + 2 * hidden
    return num_layers * layer + hidden


def tensor_bytes(folder) -> int:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as tensors:
        return sum(tensors.get_tensor(name).nbytes for name in tensors.keys())  # noqa: SIM118 (a safe_open is not iterable)


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits  # [B, T, V]


def test_a_shared_student_borrows_the_targets_embedding_and_starts_as_the_chosen_layers(tiny):
    fresh = student.new_head(tiny, SHARED)
    settings = fresh.config.specscope_drafter["settings"]
    assert settings["init_layers"] == (0, 3) and fresh.config.num_hidden_layers == 2  # first and last of 4
    assert (fresh.config.hidden_size, fresh.config.num_key_value_heads) == (64, 2)  # the target's width
    assert fresh.get_input_embeddings() is tiny.model.get_input_embeddings()
    assert fresh.get_output_embeddings() is tiny.model.get_output_embeddings()
    assert not any(p.requires_grad for p in fresh.get_input_embeddings().parameters())
    assert not any("embed" in name or "lm_head" in name for name in fresh.state_dict())
    assert torch.equal(fresh.model.layers[1].mlp.up_proj.weight, tiny.model.model.layers[3].mlp.up_proj.weight)
    # with every target layer copied in order it is the target itself, logit for logit
    whole = student.new_head(tiny, {**SHARED, "num_layers": 4, "init_layers": [0, 1, 2, 3]})
    ids = torch.randint(4, 64, (2, 12))
    assert torch.equal(logits(whole, ids), logits(tiny.model, ids))
    run = generate(tiny, PROMPT, 24, student.drafter(tiny, whole), draft_len=3)  # so the target keeps every draft
    stats = acceptance_stats(run.steps)
    assert stats.drafted_tokens > 0 and stats.accepted_tokens == stats.drafted_tokens
    assert run.output_ids == greedy(tiny, PROMPT, 24)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({**SHARED, "hidden_size": 32}, "as wide as the target: leave out hidden_size"),
        ({**SHARED, "init_layers": [0, 4]}, r"init_layers \[0, 4\] must name one target layer \(0..3\)"),
        ({**SHARED, "num_layers": 3, "init_layers": [0, 3]}, "for each of the student's 3 layers"),
        ({"init_layers": [0, 3]}, "shared-embedding student only"),
        ({**SHARED, "width": 3}, "unknown draft-model settings: width"),
        ({"draft_vocab_size": 16}, "draft_vocab_size is for a shared-embedding student only"),
        ({**SHARED, "draft_vocab_size": 65}, r"draft_vocab_size must be 1..64, got 65"),
    ],
)
def test_shared_student_settings_errors_are_clear(tiny, settings, message):
    with pytest.raises(SpecScopeError, match=message):
        student.new_head(tiny, settings)


def test_its_folder_holds_its_own_tensors_and_reloads_with_identical_logits(tiny, tmp_path):
    fresh = student.new_head(tiny, SHARED)
    with torch.no_grad():  # the folder stores fp16: round the in-memory weights so both hold the same values
        for parameter in fresh.state_dict().values():
            parameter.copy_(parameter.half().float())
    student.save(fresh, tiny, tmp_path)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as tensors:
        names = set(tensors.keys())
    assert names == set(fresh.state_dict()) and not any("embed" in n or "lm_head" in n for n in names)
    record = json.loads((tmp_path / "config.json").read_text())[STUDENT_MARKER]
    assert record["shares_target"] == ["embedding", "lm_head", "tokenizer"]
    assert record["target"]["fingerprint"] == tiny.fingerprint and shares_target(tmp_path)

    drafter = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float32"))
    loaded = drafter.draft.model
    assert loaded.get_input_embeddings() is tiny.model.get_input_embeddings()
    assert drafter.draft.tokenizer is tiny.tokenizer
    ids = torch.randint(4, 64, (2, 12))
    assert torch.equal(logits(loaded, ids), logits(fresh, ids))


def counts_favouring(tokens: set[int], vocab_size: int = 64) -> torch.Tensor:
    """Token counts [V] in which `tokens` are the most frequent."""
    counts = torch.arange(vocab_size) % 7  # [V]: a few counts for every token
    counts[sorted(tokens)] += 100
    return counts


def test_a_draft_vocabulary_keeps_drafts_inside_it_is_saved_and_stays_lossless(tiny, tmp_path):
    whole = {**SHARED, "num_layers": 4, "init_layers": [0, 1, 2, 3], "draft_vocab_size": 24}  # the target's layers
    expected = greedy(tiny, PROMPT, 24)
    used = set(expected)
    assert len(used) <= 24
    covering = student.new_head(tiny, whole, counts_favouring(used))
    d2t = covering.draft_vocabulary
    assert d2t.numel() == 24 and used <= set(d2t.tolist()) and torch.equal(d2t, d2t.sort().values)
    run = generate(tiny, PROMPT, 24, student.drafter(tiny, covering), draft_len=3)
    stats = acceptance_stats(run.steps)  # the target itself, over a vocabulary holding all its picks: all kept
    assert stats.drafted_tokens > 0 and stats.accepted_tokens == stats.drafted_tokens
    assert run.output_ids == expected

    outside = student.new_head(tiny, whole, counts_favouring(set(range(64)) - used))  # none of its picks
    run = generate(tiny, PROMPT, 24, student.drafter(tiny, outside), draft_len=3)
    drafted = {token for step in run.steps for token in step.drafted}
    assert drafted and drafted <= set(outside.draft_vocabulary.tolist())
    assert acceptance_stats(run.steps).accepted_tokens == 0 and run.output_ids == expected

    student.save(covering, tiny, tmp_path)
    assert (tmp_path / "vocab_map.safetensors").is_file()
    loaded = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float32"))
    head = loaded.draft.model.get_output_embeddings()
    assert isinstance(head, DraftVocabularyHead) and torch.equal(head.d2t, d2t)
    ids = torch.randint(4, 64, (2, 12))
    restricted, full = logits(loaded.draft.model, ids), logits(tiny.model, ids)  # [B, T, V] each
    left_out = torch.ones(64, dtype=torch.bool)
    left_out[d2t] = False
    assert torch.isneginf(restricted[..., left_out]).all()
    torch.testing.assert_close(restricted[..., d2t], full[..., d2t], rtol=1e-2, atol=1e-2)  # fp16-stored layers
    unrestricted = student.drafter(tiny, student.new_head(tiny, {**whole, "draft_vocab_size": 64}))
    assert loaded.cost().tle_per_token < unrestricted.cost().tle_per_token
    assert greedy(tiny, PROMPT, 24, loaded, draft_len=3) == expected


def whole_target_student(tiny, folder, norm_scale: float = 1.0) -> list[int]:
    """Save to `folder` a student made of all the target's layers over a draft vocabulary holding the
    target's greedy picks (so the target keeps its drafts), its first norm's weights scaled by `norm_scale`;
    the target's greedy output, which it must reproduce."""
    expected = greedy(tiny, PROMPT, 24)
    whole = {**SHARED, "num_layers": 4, "init_layers": [0, 1, 2, 3], "draft_vocab_size": 48}
    fresh = student.new_head(tiny, whole, counts_favouring(set(expected)))
    with torch.no_grad():
        fresh.model.layers[0].input_layernorm.weight.mul_(norm_scale)
    student.save(fresh, tiny, folder)
    return expected


@pytest.mark.parametrize("native_bf16", [True, False])
def test_auto_holds_it_in_bfloat16_where_the_cpu_multiplies_bf16_natively(tiny, tmp_path, monkeypatch, native_bf16):
    whole_target_student(tiny, tmp_path)
    monkeypatch.setattr("backend.drafters.head_precision.has_bf16_unit", lambda: native_bf16)
    drafter = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path)))  # an fp32 CPU target
    own = drafter.draft.model.get_decoder().layers[0].self_attn.q_proj
    assert own.weight.dtype == (torch.bfloat16 if native_bf16 else torch.float32)
    assert drafter.draft.model.get_output_embeddings().weight.dtype == own.weight.dtype


def test_held_in_float16_it_narrows_its_own_layers_only_and_drafts_within_rounding(tiny, tmp_path):
    expected = whole_target_student(tiny, tmp_path)
    exact = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float32"))
    half = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float16"))
    own = [m for m in half.draft.model.get_decoder().layers.modules() if isinstance(m, nn.Linear)]
    assert own and all(isinstance(m, NarrowLinear) and m.weight.dtype == torch.float16 for m in own)
    head = half.draft.model.get_output_embeddings()
    assert isinstance(head, DraftVocabularyHead) and head.weight.dtype == torch.float16
    assert half.draft.model.get_input_embeddings() is tiny.model.get_input_embeddings()  # borrowed, untouched
    assert tiny.model.get_output_embeddings().weight.dtype == torch.float32
    ids = torch.randint(4, 64, (2, 12))
    narrow, full = logits(half.draft.model, ids), logits(exact.draft.model, ids)  # [B, T, V] float32 each
    assert narrow.dtype == torch.float32 and not torch.equal(narrow, full)  # the products went through float16
    torch.testing.assert_close(narrow, full, rtol=1e-2, atol=1e-2)
    assert generate(tiny, PROMPT, 24, half, draft_len=3).output_ids == expected


def test_a_float16_pass_that_overflows_ends_drafting_and_the_output_stays_the_targets(tiny, tmp_path):
    expected = whole_target_student(tiny, tmp_path, norm_scale=60000.0)  # normed inputs far beyond float16's range
    exact = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float32"))
    run = generate(tiny, PROMPT, 24, exact, draft_len=3)
    assert run.output_ids == expected and all(step.drafted for step in run.steps[:-1])  # finite in float32
    half = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path), head_precision="float16"))
    run = generate(tiny, PROMPT, 24, half, draft_len=3)
    assert run.output_ids == expected
    assert not any(step.drafted for step in run.steps)  # the last step asks for no draft: no reason there
    assert all(step.stop_reason == "overflow" for step in run.steps[:-1])


@pytest.mark.slow
def test_a_float16_student_on_the_compiled_path_runs_narrow_projections_and_stays_lossless(tiny, tmp_path):
    expected = whole_target_student(tiny, tmp_path)
    compiled_target = dataclasses.replace(tiny, compile="on")
    options = DrafterOptions(drafter_path=str(tmp_path), head_precision="float16")
    drafter = build_drafter("draft-model", compiled_target, options)
    fast = drafter.runner.passes.fast
    assert fast.compiled and isinstance(fast.module.layers[0].qkv, NarrowLinear)
    assert fast.module.layers[0].gate_up.weight.dtype == torch.float16
    run = generate(tiny, PROMPT, 24, drafter, draft_len=3)
    stats = acceptance_stats(run.steps)  # the target's own layers, within float16 rounding: nearly every draft kept
    assert run.output_ids == expected and stats.accepted_tokens >= 0.9 * stats.drafted_tokens > 0


def test_a_shared_student_refuses_another_target(tiny, tmp_path):
    student.save(student.new_head(tiny, SHARED), tiny, tmp_path)
    same_shapes = tiny_llama(seed=1)  # the same vocabulary and width, another model
    with pytest.raises(SpecScopeError, match=r"was trained for another target \('tiny-0'"):
        build_drafter("draft-model", same_shapes, DrafterOptions(drafter_path=str(tmp_path)))
    narrower = tiny_llama(seed=0, hidden=32, heads=2, kv_heads=1)
    with pytest.raises(SpecScopeError, match="vocabulary 64 and hidden size 64; 'tiny-0' has 64 and 32") as error:
        build_drafter("draft-model", narrower, DrafterOptions(drafter_path=str(tmp_path)))
    assert "\n" not in str(error.value)


def test_ordinary_folders_are_not_taken_for_shared_students(tiny, tiny_folder, tmp_path):
    assert not shares_target(tiny_folder)  # a plain HF folder
    student.save(student.new_head(tiny), tiny, tmp_path / "own")
    assert not shares_target(tmp_path / "own")  # an own-embedding student
    assert shares_target(SHIPPED_DIR / "draft-model-smollm2")  # the shipped student borrows the target's parts
    assert not shares_target("HuggingFaceTB/SmolLM2-135M") and not shares_target("model.gguf")


def test_stored_size_follows_the_formula_and_smollm2_shapes_fit_20_mb(tiny, tmp_path):
    student.save(student.new_head(tiny, SHARED), tiny, tmp_path / "tiny")
    assert tensor_bytes(tmp_path / "tiny") == 2 * stored_weights(tiny.model.config, 2)  # fp16
    # SmolLM2-135M's layer shapes (H 576, 9 + 3 heads of 64, I 1536); the vocabulary is not stored, so 64 do
    smol = tiny_llama(seed=2, layers=2, hidden=576, heads=9, kv_heads=3, intermediate=1536)
    folder = student.save(student.new_head(smol, SHARED), smol, tmp_path / "smol")
    assert stored_weights(smol.model.config, 2) == 7_080_768  # 2 x 3 540 096 + 576
    assert tensor_bytes(folder) == 14_161_536
    assert sum(f.stat().st_size for f in folder.iterdir()) <= 20 * MB


def test_training_lowers_the_loss_leaves_the_target_alone_and_drafts_losslessly(tiny, distilled, tmp_path):
    torch.manual_seed(0)
    embedding = tiny.model.get_input_embeddings().weight.detach().clone()  # [V, H]
    lm_head = tiny.model.get_output_embeddings().weight.detach().clone()  # [V, H]
    head = student.new_head(tiny, SHARED)
    first_layer = head.model.layers[0].self_attn.q_proj.weight.detach().clone()
    report = train(student, tiny, head, *distilled, small_settings(30), tmp_path)
    first, last = report.train_loss[0][1], sum(loss for _, loss in report.train_loss[-5:]) / 5
    assert last < first, (first, last)
    assert torch.equal(tiny.model.get_input_embeddings().weight, embedding)
    assert torch.equal(tiny.model.get_output_embeddings().weight, lm_head)
    assert not torch.equal(head.model.layers[0].self_attn.q_proj.weight, first_layer)  # its own layers learnt
    checkpoint = torch.load(tmp_path / CHECKPOINT, map_location="cpu", weights_only=False)
    assert set(checkpoint["head"]) == set(head.state_dict())  # the borrowed tensors are not checkpointed either
    student.new_head(tiny, SHARED).load_state_dict(checkpoint["head"])  # and a resumed student needs none

    drafter = build_drafter("draft-model", tiny, DrafterOptions(drafter_path=str(tmp_path)))
    assert generate(tiny, PROMPT, 24, drafter, draft_len=3).output_ids == greedy(tiny, PROMPT, 24)
