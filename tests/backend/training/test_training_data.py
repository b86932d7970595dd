"""The training data pipeline: the corpus (deterministic, held out from the evaluation suites), the
self-distillation cache (answers are the target's greedy output, hidden states those of a fresh
forward, resumable) and the training batches."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.drafters.trained import TargetParts, target_distribution
from backend.lab.prompts import encode_conversation
from backend.training.corpus import Instruction, build_instructions
from backend.training.dataset import batches, distil, reference_ids
from backend.training.readings import build_readings
from tests.helpers.tiny import tiny_instructions

LAYERS = (2, 4)


def test_corpus_is_deterministic_held_out_and_split():
    first, second = build_instructions(), build_instructions()
    assert first == second and len(first) > 500
    sources = {i.source.split(":")[0] for i in first}
    assert sources == {"doc", "code", "chat"}
    validation = [i for i in first if i.split == "validation"]
    assert 0.04 < len(validation) / len(first) < 0.15


def test_distilled_answers_are_the_targets_greedy_output_with_its_hidden_states(tiny, tmp_path):
    instructions = tiny_instructions()
    data = distil(tiny, instructions, LAYERS, "train", max_new_tokens=10, batch_size=4, cache_root=tmp_path)
    shard = load_file(str(data.shards()[0]))
    starts = shard["starts"].tolist()
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, 512)
    prompts = [encode_conversation(tiny.tokenizer, [i.text], []) for i in instructions if i.split == "train"]
    for number in range(3):  # instructions are distilled in a shuffled order: find each sequence's prompt
        sequence = shard["input_ids"][starts[number] : starts[number + 1]]
        prompt = max((p for p in prompts if sequence.tolist()[: len(p)] == p), key=len)
        answer = engine.generate(prompt, None, GenerationSettings(10, draft_len=0)).run().output_ids
        assert sequence.tolist() == prompt + answer
        mask = shard["loss_mask"][starts[number] : starts[number + 1]]
        assert mask.sum() == len(answer) and bool(mask[len(prompt) - 1]) and not bool(mask[-1])
        with torch.inference_mode():
            fresh = tiny.model(sequence[None], output_hidden_states=True).hidden_states
        for layer in LAYERS:
            cached = shard[f"hidden.{layer}"][starts[number] : starts[number + 1]].float()
            assert torch.allclose(cached, fresh[layer][0], atol=2e-3)  # stored in fp16
    assert data.tokens() == starts[-1]


def test_distillation_resumes_and_respects_the_budget(tiny, tmp_path):
    instructions = tiny_instructions(80)
    first = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path, token_budget=10)
    assert len(first.shards()) == 1  # one shard of 32 sequences passes a 10-token budget
    tokens_at_first = first.tokens()
    again = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    assert len(again.shards()) > 1 and again.tokens() > tokens_at_first
    done = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    assert done.shards() == again.shards()  # nothing left to do


def shard_sequences(shard_path) -> set[tuple[int, ...]]:
    """The token sequences (prompt + answer) one cached shard holds."""
    shard = load_file(str(shard_path))
    starts = shard["starts"].tolist()
    return {tuple(shard["input_ids"][a:b].tolist()) for a, b in zip(starts[:-1], starts[1:], strict=True)}


def test_another_order_seed_starts_on_other_instructions_and_resumes_without_repeats(tiny, tmp_path):
    instructions = tiny_instructions(40)  # distinct texts, more than one shard
    shard = dict(max_new_tokens=4, token_budget=10)
    default = distil(tiny, instructions, LAYERS, "train", cache_root=tmp_path / "a", **shard)
    again = distil(tiny, instructions, LAYERS, "train", cache_root=tmp_path / "b", order_seed=0, **shard)
    other = distil(tiny, instructions, LAYERS, "train", cache_root=tmp_path / "c", order_seed=1, **shard)
    assert shard_sequences(default.shards()[0]) == shard_sequences(again.shards()[0])  # seed 0: the cache's order
    assert shard_sequences(other.shards()[0]) != shard_sequences(default.shards()[0])
    # resumed under another seed, a cache still distils each instruction once
    done = distil(tiny, instructions, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path / "c", order_seed=2)
    train = sum(i.split == "train" for i in instructions)
    assert sum(len(load_file(str(s))["starts"]) - 1 for s in done.shards()) == train
    assert len(set().union(*map(shard_sequences, done.shards()))) == train


def test_batches_are_windows_with_masks_and_hidden_states(tiny, tmp_path):
    data = distil(tiny, tiny_instructions(), LAYERS, "train", max_new_tokens=10, cache_root=tmp_path)
    batch = next(batches(data, window=8, rows=3, device=torch.device("cpu"), dtype=torch.float32))
    assert batch.input_ids.shape == (3, 8) and batch.loss_mask.shape == (3, 8)
    assert set(batch.hidden) == set(LAYERS) and batch.hidden[2].shape == (3, 8, 64)
    assert not batch.loss_mask[:, -1].any()
    seen = sum(1 for _ in batches(data, window=8, rows=3, device=torch.device("cpu"), dtype=torch.float32, epochs=1))
    assert seen >= 2


def test_readings_are_deterministic_held_out_questions_with_existing_answers():
    first = build_readings()
    assert first == build_readings() and len(first) > 1000
    assert all(reading.reference and reading.reference not in reading.text for reading in first)
    assert {reading.source.split(":")[0] for reading in first} == {"doc", "docstring", "code"}


def test_prefill_teacher_reads_the_reference_and_its_targets_are_the_targets_distributions(tiny, tmp_path):
    readings = [
        Instruction(
            f"r{i}", "test", " ".join(f"w{5 + (i + j) % 30}" for j in range(5)), reference=f"w{9 + i} w12 w{20 + i} w7"
        )
        for i in range(24)
    ]
    layers = (*LAYERS, 4)  # 4: the tiny target's final (normed) state
    data = distil(tiny, readings, layers, "train", max_new_tokens=2, cache_root=tmp_path)
    shard = load_file(str(data.shards()[0]))
    starts = shard["starts"].tolist()
    sequence = shard["input_ids"][starts[0] : starts[1]]
    reading = next(r for r in readings if sequence.tolist()[-5:] == reference_ids(tiny, r.reference))
    prompt = encode_conversation(tiny.tokenizer, [reading.text], [])
    answer = reference_ids(tiny, reading.reference)
    assert len(answer) == 5 > 2  # read whole (max_new_tokens caps generated answers only), ended with <eos>
    assert sequence.tolist() == prompt + answer
    mask = shard["loss_mask"][starts[0] : starts[1]]
    assert mask.nonzero().flatten().tolist() == list(range(len(prompt) - 1, len(prompt) + len(answer) - 1))
    with torch.inference_mode():
        logits = tiny.model(sequence[None]).logits[0]  # [T, V]
        cached = shard["hidden.4"][starts[0] : starts[1]].float()  # [T, H]
        every_token = torch.arange(tiny.facts.vocab_size)
        taught = target_distribution(TargetParts.of(tiny), cached[mask], every_token)  # [N, V]
    assert torch.allclose(taught, torch.softmax(logits[mask], dim=-1), atol=2e-3)  # states stored in fp16


def test_generated_and_prefilled_caches_train_together(tiny, tmp_path):
    generated = distil(tiny, tiny_instructions(), LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    readings = [Instruction(f"r{i}", "test", f"w{5 + i} w6", reference=f"w{7 + i} w8 w9") for i in range(24)]
    prefilled = distil(tiny, readings, LAYERS, "train", max_new_tokens=4, cache_root=tmp_path)
    both = generated + prefilled
    assert both.shards() == generated.shards() + prefilled.shards()
    assert both.tokens() == generated.tokens() + prefilled.tokens()
    seen = sum(int(b.loss_mask.sum()) for b in batches(both, 64, 1, torch.device("cpu"), torch.float32, epochs=1))
    assert seen == sum(
        int(load_file(str(shard))["loss_mask"].sum()) for shard in both.shards()
    )  # every labelled position of both caches is trained on once per epoch (windows hold whole sequences)
