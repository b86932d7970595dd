"""What the trained drafters (EAGLE-3, MTP, DFlash, DSpark) share: the frozen parts of the target they
borrow, the batch they train on, the reduced draft vocabulary, and their weights folder on disk.

A weights folder (`data/drafters/NAME/`) holds `config.json` (the mechanism's `kind`, its own shape
settings, and the target it was trained for: fingerprint, vocabulary size, hidden size, layers),
`model.safetensors` (fp16/bf16 storage; loaded as the target's dtype), optionally `vocab_map.safetensors`
(`d2t`, the draft-to-target token map of a reduced vocabulary) and a model card `README.md`.
Loading checks all of that against the target and says what is wrong in one sentence.

Knows nothing about any one mechanism's layers, the engine or the training loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab_map.safetensors"


class DrafterWeightsError(SpecScopeError):
    """A trained drafter's folder is missing, incomplete, or made for another target."""


@dataclass
class TargetParts:
    """The frozen target pieces a trained drafter reuses: token embeddings, final norm and LM head."""

    embed: torch.nn.Embedding  # [V, H]
    norm: torch.nn.Module  # the target's final RMSNorm (its output is hidden state L, HF numbering)
    lm_head: torch.nn.Linear  # [V, H] (tied to embed on SmolLM2)
    num_layers: int
    hidden_size: int
    vocab_size: int
    config: object  # the target's text config (rms_norm_eps, rope settings, head sizes, ...)

    @classmethod
    def of(cls, target: LoadedModel) -> TargetParts:
        model = target.model
        config = model.config.get_text_config(decoder=True)
        return cls(model.get_input_embeddings(), model.get_decoder().norm, model.get_output_embeddings(),
                   config.num_hidden_layers, config.hidden_size, config.vocab_size, config)


@dataclass
class TrainBatch:
    """Sequences with the target's hidden states, as the training loop feeds every mechanism.
    Row t of hidden[l] is the target's state at position t (HF `output_hidden_states` numbering:
    0 = embeddings, L = final, normed), i.e. the state that predicts input_ids[:, t + 1]."""

    input_ids: torch.Tensor  # [B, T] long
    loss_mask: torch.Tensor  # [B, T] bool: positions whose NEXT token is a training target (responses)
    hidden: dict[int, torch.Tensor]  # layer -> [B, T, H]


def draft_vocabulary(token_counts: torch.Tensor, size: int) -> torch.Tensor:
    """d2t: the `size` most frequent target token ids, ascending (EAGLE-3's reduced draft vocabulary).
    token_counts [V]: how often each target token occurs in the training responses."""
    size = min(size, token_counts.numel())
    return torch.sort(torch.topk(token_counts.float(), size).indices).values  # [Vd]


def save_drafter(folder: str | Path, kind: str, settings: dict, state: dict[str, torch.Tensor],
                 target: LoadedModel, d2t: torch.Tensor | None = None, dtype: torch.dtype = torch.float16) -> Path:
    """Write a weights folder; tensors are stored in `dtype` (fp16 by default) to keep files small."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    facts = target.facts
    config = {"kind": kind, "settings": settings,
              "target": {"spec": target.spec, "fingerprint": target.fingerprint, "vocab_size": facts.vocab_size,
                         "hidden_size": facts.hidden_size, "num_layers": facts.num_layers}}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file({name: tensor.detach().to("cpu", dtype).contiguous() for name, tensor in state.items()},
              str(folder / WEIGHTS_FILE))
    if d2t is not None:
        save_file({"d2t": d2t.to("cpu", torch.int64).contiguous()}, str(folder / VOCAB_FILE))
    return folder


@dataclass
class DrafterFiles:
    settings: dict
    state: dict[str, torch.Tensor]  # on the target's device, in its dtype
    d2t: torch.Tensor | None  # [Vd] long, or None for a full vocabulary


def load_drafter(folder: str | Path, kind: str, target: LoadedModel) -> DrafterFiles:
    """Read a weights folder for `target`, with a clear error for every way it can be wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DrafterWeightsError(f"no trained {kind} drafter at {folder}: train one with `python -m backend "
                                  f"train --kind {kind} --out {folder}`")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise DrafterWeightsError(f"{folder} is not a complete drafter folder: {name} is missing")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
        trained_for = config["target"]
        found_kind = config["kind"]
    except (ValueError, KeyError) as error:
        raise DrafterWeightsError(f"{folder / CONFIG_FILE} is not a drafter config ({error})") from error
    if found_kind != kind:
        raise DrafterWeightsError(f"{folder} holds a {found_kind} drafter, not {kind}")
    facts = target.facts
    if (trained_for.get("vocab_size"), trained_for.get("hidden_size")) != (facts.vocab_size, facts.hidden_size):
        raise DrafterWeightsError(
            f"{folder} was trained for a target with vocabulary {trained_for.get('vocab_size')} and hidden size "
            f"{trained_for.get('hidden_size')}; '{target.spec}' has {facts.vocab_size} and {facts.hidden_size}")
    if trained_for.get("fingerprint") and trained_for["fingerprint"] != target.fingerprint:
        raise DrafterWeightsError(f"{folder} was trained for another target ('{trained_for.get('spec')}', "
                                  f"fingerprint {trained_for['fingerprint'][:12]}), not '{target.spec}'")
    device, dtype = target.device, target.dtype
    try:
        state = {name: tensor.to(device, dtype if tensor.is_floating_point() else tensor.dtype)
                 for name, tensor in load_file(str(folder / WEIGHTS_FILE)).items()}
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise DrafterWeightsError(f"{folder / WEIGHTS_FILE} cannot be read: {error}") from error
    d2t = None
    if (folder / VOCAB_FILE).is_file():
        d2t = load_file(str(folder / VOCAB_FILE))["d2t"].to(device)
        if d2t.ndim != 1 or int(d2t.min()) < 0 or int(d2t.max()) >= facts.vocab_size:
            raise DrafterWeightsError(f"{folder / VOCAB_FILE} maps draft tokens outside the target's vocabulary "
                                      f"of {facts.vocab_size}")
    return DrafterFiles(config["settings"], state, d2t)
