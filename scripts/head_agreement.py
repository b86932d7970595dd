"""How often a trained head's drafts agree with the target, teacher-forced, on each split of each cached
distillation of the target: per position j of a draft, the share of answer positions where the drafter's top
token there equals the target's argmax (its training loss's metric: a chain head's `acc_step{j}` after j own
steps, a block drafter's `top1` per slot, DSpark's after its Markov correction, the student's `top1`), and
the share of the target's next tokens its draft vocabulary holds at all. A training split far above its
validation split says the head has learnt its data by heart and needs more of it rather than more steps.

    python scripts/head_agreement.py data/drafters/eagle3-smollm2 [--kind eagle3] [--batches 8]

Reads the caches `train` left under $SPECSCOPE_CACHE (or ~/.cache/specscope), those holding every hidden state
the head reads; distils nothing. Knows nothing about any one mechanism beyond the trainable-kind interface.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.cli.common import load_target  # noqa: E402
from backend.drafters.shipped import STUDENT_MARKER  # noqa: E402
from backend.training.dataset import DistilledData, batches, default_cache_root, read_manifest  # noqa: E402
from backend.training.kinds import kind_named  # noqa: E402
from backend.training.loop import frozen_target_parts  # noqa: E402
from backend.training.student import DRAFT_VOCABULARY  # noqa: E402

WINDOW, ROWS = 128, 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder `train` wrote (weights, config.json)")
    parser.add_argument("--kind", default=None, help="the folder's kind (default: the one its config.json records)")
    parser.add_argument("--batches", type=int, default=8, help=f"batches of {ROWS} x {WINDOW} windows per split")
    args = parser.parse_args()
    config = json.loads((args.folder / "config.json").read_text())
    kind_name = args.kind or config.get("kind") or config[STUDENT_MARKER]["kind"]
    target = load_target(
        argparse.Namespace(target="default", device="cpu", dtype="float32", allow_remote_code=False, compile="off")
    )
    kind = kind_named(kind_name)
    head, settings = kind.load_trained(target, args.folder)
    head.eval()
    parts = frozen_target_parts(target)
    needed = set(kind.training_layers(target, settings))
    draftable = draftable_tokens(head, target)
    root = default_cache_root()
    caches = usable_caches(root, target, needed)
    if not caches:
        print(
            f"error: no distillation cache of the default target under {root} holds the hidden "
            f"states the {kind_name} head reads: fill one with `python -m backend train --kind {kind_name} --out "
            "runs/distil --distil-only`",
            file=sys.stderr,
        )
        return 2
    print(f"{kind_name} from {args.folder}: teacher-forced agreement with the target's argmax, per draft position")
    for cache, layers in caches:
        for split in ("train", "validation"):
            data = DistilledData((cache,), layers, split)
            if not data.shards():
                continue
            shares, covered = split_agreement(kind, head, parts, data, draftable, args.batches, target.device)
            shown = "  ".join(f"draft {j + 1} {share:.1%}" for j, share in enumerate(shares))
            print(
                f"{cache.name} {split:10s} {data.tokens():>8} tokens  {shown}  "
                f"draft vocabulary holds {covered:.1%} of next tokens"
            )
    return 0


def usable_caches(root: Path, target, needed: set[int]) -> list[tuple[Path, tuple[int, ...]]]:
    """(folder, the hidden states its shards hold) of each distillation cache of `target` under `root` that holds
    every hidden state in `needed`."""
    caches = [
        (cache, tuple(read_manifest(cache)["layers"])) for cache in sorted(root.glob(f"{target.fingerprint[:16]}-*"))
    ]
    return [(cache, layers) for cache, layers in caches if needed <= set(layers)]


def draftable_tokens(head: torch.nn.Module, target) -> torch.Tensor:
    """[V] bool: the target's tokens the head can draft (its d2t rows; every token for a whole-vocabulary head)."""
    d2t = getattr(head, "d2t", None)
    if d2t is None:
        d2t = getattr(head, DRAFT_VOCABULARY, None)
    in_vocabulary = torch.zeros(target.facts.vocab_size, dtype=torch.bool)
    in_vocabulary[d2t.cpu() if d2t is not None else slice(None)] = True
    return in_vocabulary


@torch.no_grad()
def split_agreement(
    kind,
    head: torch.nn.Module,
    parts,
    data: DistilledData,
    in_vocabulary: torch.Tensor,
    batch_count: int,
    device: torch.device,
) -> tuple[list[float], float]:
    """Over the first `batch_count` batches of one split: the mean agreement at each draft position, and the
    share of the target's next tokens the draft vocabulary holds."""
    sums: list[float] = []
    done = covered = scored = 0
    torch.manual_seed(0)  # block drafters draw their anchors
    for batch in batches(data, WINDOW, ROWS, device, torch.float32, epochs=1):
        if done == batch_count:
            break
        done += 1
        _, metrics = kind.training_loss(head, parts, batch)
        shares = agreement(metrics)
        sums = [a + b for a, b in zip(sums, shares, strict=True)] if sums else shares
        following = batch.input_ids[:, 1:][batch.loss_mask[:, :-1]]  # [n]: the target's next tokens
        covered += int(in_vocabulary[following.cpu()].sum())
        scored += following.numel()
    return [total / max(done, 1) for total in sums], covered / max(scored, 1)


def agreement(metrics: dict) -> list[float]:
    """The share of positions agreeing with the target at each position of a draft, from a kind's loss metrics."""
    chain = sorted((int(name[8:]), value) for name, value in metrics.items() if name.startswith("acc_step"))
    if chain:
        return [value for _, value in chain]
    shares = metrics.get("top1_markov", metrics["top1"])
    return list(shares) if isinstance(shares, list) else [shares]


if __name__ == "__main__":
    sys.exit(main())
