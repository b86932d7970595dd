"""GPU figures that need no downloaded weights: a random model with SmolLM2-135M's exact shapes (30
layers, 576 wide, 9 query / 3 KV heads, 49152 tokens) in bf16 on CUDA, for what costs depend on
(shapes, not weights):

  1. verification cost: one forward of T = 1..64 new tokens on a 512-token cache, at B = 1 and 16,
     relative to T = 1 (how far the "verifying D drafts is free" assumption holds on this GPU);
  2. plain batched decoding: total throughput at B = 1, 4, 16, 64 (the batched engine, 64 new tokens);
  3. the batched engine's rows against single-sequence decoding in bf16 (agreement, reported);
  4. a short EAGLE-3 training run on CUDA in bf16 (a tiny target), showing the training path works there.

    python scripts/gpu_lab.py [--out FILE]

Prints a table per part and writes them as JSON. Knows nothing about the dashboard.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.core.batch import BatchEngine  # noqa: E402
from backend.core.engine import GenerationSettings, SpeculativeEngine  # noqa: E402
from backend.core.kv import batched_forward, new_cache, stack_caches  # noqa: E402
from backend.core.models import LoadedModel  # noqa: E402
from backend.drafters import build_drafter  # noqa: E402

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    initializer_range=0.1,
)


def smollm2_shaped(device: torch.device) -> LoadedModel:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).to(device, torch.bfloat16).eval()
    return LoadedModel("smollm2-shaped-random", "memory", "random", model, None, device, torch.bfloat16)


def timed(function, repeats: int = 20) -> float:
    for _ in range(3):
        function()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeats


@torch.inference_mode()
def verification_cost(target: LoadedModel) -> list[dict]:
    rows = []
    for batch in (1, 16):
        times = {}
        for width in (1, 2, 4, 8, 16, 32, 64):
            caches = []
            for _ in range(batch):
                cache = new_cache(target.model)
                target.model(input_ids=torch.randint(0, 49152, (1, 512), device=target.device), cache=cache)
                caches.append(cache)
            cache, valid = stack_caches(caches, new_cache(target.model), target.device)
            inputs = torch.randint(0, 49152, (batch, width), device=target.device)
            mask = torch.cat([valid, torch.ones(batch, width, dtype=torch.bool, device=target.device)], dim=1)
            positions = 512 + torch.arange(width, device=target.device)[None].expand(batch, -1)

            def forward(inputs=inputs, mask=mask, positions=positions, cache=cache):
                batched_forward(target.model, inputs, mask, positions, cache)
                for layer in cache.layers:  # drop what the pass appended, so every repeat sees 512 slots
                    layer.keys, layer.values = layer.keys[:, :, :512], layer.values[:, :, :512]

            times[width] = timed(forward)
        rows += [
            {"batch_size": batch, "tokens": w, "ms": 1000 * t, "vs_one_token": t / times[1]} for w, t in times.items()
        ]
    return rows


def plain_throughput(target: LoadedModel) -> list[dict]:
    engine = SpeculativeEngine(target.model, set(), 8192)
    batcher = BatchEngine(engine)
    prompts = [torch.randint(4, 49152, (128,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(64)]
    batcher.generate(prompts[:2], None, GenerationSettings(8, draft_len=0))  # warm-up
    rows = []
    for size in (1, 4, 16, 64):
        result = batcher.generate(prompts[:size], None, GenerationSettings(64, draft_len=0))
        rows.append(
            {"batch_size": size, "throughput_tps": result.throughput, "decode_throughput_tps": result.decode_throughput}
        )
    for row in rows:
        row["vs_b1"] = row["throughput_tps"] / rows[0]["throughput_tps"]
        row["decode_vs_b1"] = row["decode_throughput_tps"] / rows[0]["decode_throughput_tps"]
    return rows


def batched_agreement(target: LoadedModel) -> dict:
    engine = SpeculativeEngine(target.model, set(), 8192)
    base = [5, 9, 13, 22, 5, 9, 13, 40, 41]
    prompts = [[t + i for t in base] * 3 for i in range(8)]
    single = [engine.generate(p, None, GenerationSettings(48, draft_len=0)).run().output_ids for p in prompts]
    batched = BatchEngine(engine).generate(prompts, build_drafter("ngram", target), GenerationSettings(48, draft_len=4))
    same = sum(row.output_ids == reference for row, reference in zip(batched.rows, single, strict=True))
    return {"rows": len(prompts), "identical_rows": same}


def cuda_training() -> dict:
    from backend.drafters import eagle3
    from backend.training.dataset import distil
    from backend.training.loop import TrainSettings, train
    from tests.helpers.tiny import tiny_instructions, tiny_llama

    tiny = tiny_llama()
    tiny.model.to("cuda", torch.bfloat16)
    tiny.device, tiny.dtype = torch.device("cuda"), torch.bfloat16
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        instructions = tiny_instructions(96)
        layers = eagle3.training_layers(tiny)
        train_data = distil(tiny, instructions, layers, "train", 24, cache_root=root)
        validation_data = distil(tiny, instructions, layers, "validation", 24, cache_root=root)
        head = eagle3.new_head(tiny)
        settings = TrainSettings(
            tokens=200 * 8 * 64, window=64, rows=8, validate_every=100, validation_prompts=4, validation_new_tokens=24
        )
        started = time.perf_counter()
        report = train(
            eagle3,
            tiny,
            head,
            train_data,
            validation_data,
            [i for i in instructions if i.split == "validation"] or instructions[:4],
            settings,
            root / "out",
        )
        return {
            "steps": report.steps,
            "seconds": time.perf_counter() - started,
            "first_loss": report.train_loss[0][1],
            "last_loss": report.train_loss[-1][1],
            "validation": report.validation,
            "dtype": str(next(head.parameters()).dtype),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_lab.json"))
    args = parser.parse_args()
    assert torch.cuda.is_available(), "no CUDA device: this check is for a GPU machine"
    device = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, flush=True)
    target = smollm2_shaped(device)
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, part in (
        ("verification_cost", lambda: verification_cost(target)),
        ("plain_throughput", lambda: plain_throughput(target)),
        ("batched_agreement", lambda: batched_agreement(target)),
        ("cuda_training", cuda_training),
    ):
        try:
            results[name] = part()
        except Exception as error:  # one failing part must not hide the others' figures
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        print(name, json.dumps(results[name], indent=1), flush=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
