"""The one weights-folder format of every trained head (EAGLE-3, MTP, DFlash, DSpark), and the one way a
head is made for a target: fresh (`new_head`), written (`save`) and read back (`load_head`, and the
drafters' base `TrainedDrafter.load`).

A weights folder (`data/drafters/NAME/`) holds `config.json` (the head's `kind`, its config's settings,
and the target it was trained for: fingerprint, vocabulary size, hidden size, layers), `model.safetensors`
(fp16 storage by default; loaded as the target's dtype), `vocab_map.safetensors` (`d2t`, the draft-to-target
token map) unless the head drafts over the whole vocabulary in order, and a model card `README.md`.
Loading checks all of that against the target and says what is wrong in one sentence.

Knows nothing about any one kind beyond the TrainedHead interface (trained.py).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters.trained import DrafterWeightsError, TargetParts, TrainedHead, whole_vocabulary

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab_map.safetensors"
DEFAULT_DRAFT_VOCAB = 8192  # a reduced vocabulary (EAGLE-3's d2t) is what makes a head cheap here


def checked_settings(config_class: type, kind: str, settings: dict) -> dict:
    """`settings` when every key is a field of `config_class`, else a clear error naming the known ones."""
    known = [field.name for field in fields(config_class)]
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise SpecScopeError(f"unknown {kind} settings: {', '.join(unknown)} (known: {', '.join(known)})")
    return settings


def check_vocabulary(size: int, parts: TargetParts) -> None:
    if not 1 <= size <= parts.vocab_size:
        raise SpecScopeError(f"the draft vocabulary must hold 1..{parts.vocab_size} tokens, got {size}")


def draft_vocabulary(token_counts: torch.Tensor, size: int) -> torch.Tensor:
    """d2t: the `size` most frequent target token ids, ascending (EAGLE-3's reduced draft vocabulary).
    token_counts [V]: how often each target token occurs in the training responses."""
    size = min(size, token_counts.numel())
    return torch.sort(torch.topk(token_counts.float(), size).indices).values  # [Vd]


def new_head(
    head_class: type[TrainedHead],
    target: LoadedModel,
    settings: dict | None = None,
    token_counts: torch.Tensor | None = None,
    d2t: torch.Tensor | None = None,
) -> TrainedHead:
    """An untrained head for `target`, on its device and dtype. The draft vocabulary: `d2t` if given, else the
    draft_vocab_size most frequent tokens of `token_counts` [V], else the first draft_vocab_size ids (a
    placeholder for untrained heads)."""
    parts = TargetParts.of(target)
    settings = dict(settings or {})
    if d2t is not None:
        settings.setdefault("draft_vocab_size", d2t.numel())
    config = head_class.config_class.for_target(parts, **settings)
    size = config.draft_vocab_size
    if d2t is None:
        counted = token_counts is not None and size < parts.vocab_size
        d2t = draft_vocabulary(token_counts, size) if counted else torch.arange(size)
    return head_class(parts, config, d2t.long()).to(target.device, target.dtype)


def save(head: TrainedHead, target: LoadedModel, folder: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write `head` as a weights folder for `target`; tensors are stored in `dtype` to keep files small."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"kind": head.kind, "settings": head.config.to_dict(), "target": target_record(target)}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file(
        {name: tensor.detach().to("cpu", dtype).contiguous() for name, tensor in head.state_dict().items()},
        str(folder / WEIGHTS_FILE),
    )
    if not whole_vocabulary(head.d2t, head.parts.vocab_size):
        write_vocabulary(folder, head.d2t)
    return folder


def write_vocabulary(folder: Path, d2t: torch.Tensor) -> None:
    """Write d2t [Vd] as the folder's VOCAB_FILE (read back by read_vocabulary)."""
    save_file({"d2t": d2t.to("cpu", torch.int64).contiguous()}, str(folder / VOCAB_FILE))


def load_head(head_class: type[TrainedHead], folder: str | Path, target: LoadedModel) -> TrainedHead:
    """The `head_class` head of a weights folder, for `target`, in eval mode; a DrafterWeightsError saying what
    is wrong for every way the folder can be wrong."""
    folder, kind = Path(folder), head_class.kind
    settings = _read_config(folder, kind, target)
    parts = TargetParts.of(target)
    try:
        state = {
            name: tensor.to(target.device, target.dtype if tensor.is_floating_point() else tensor.dtype)
            for name, tensor in load_file(str(folder / WEIGHTS_FILE)).items()
        }
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise DrafterWeightsError(f"{folder / WEIGHTS_FILE} cannot be read: {error}") from error
    d2t = read_vocabulary(folder, parts.vocab_size)
    try:
        config = head_class.config_class.for_target(parts, **settings)
        if d2t is None and config.draft_vocab_size < parts.vocab_size:
            raise SpecScopeError(f"its head drafts over {config.draft_vocab_size} tokens but {VOCAB_FILE} is missing")
        head = head_class(parts, config, torch.arange(parts.vocab_size) if d2t is None else d2t)
        head.load_state_dict(head_class.upgrade_state(state))
    except (SpecScopeError, TypeError, ValueError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0]
        raise DrafterWeightsError(
            f"{folder} does not hold a usable {kind} head for '{target.spec}': {reason}"
        ) from error
    return head.to(target.device, target.dtype).eval()


def trained_head(head_class: type[TrainedHead], folder: str | Path, target: LoadedModel) -> tuple[TrainedHead, dict]:
    """(the `head_class` head of a weights folder in train mode, to train further; the settings it was built
    with), with load_head's errors."""
    head = load_head(head_class, folder, target)
    return head.train(), head.config.to_dict()


def _read_config(folder: Path, kind: str, target: LoadedModel) -> dict:
    """The settings of a folder's config.json, once it is known to hold a `kind` head made for `target`."""
    if not folder.is_dir():
        raise DrafterWeightsError(
            f"no trained {kind} drafter at {folder}: train one with `python -m backend "
            f"train --kind {kind} --out {folder}`"
        )
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise DrafterWeightsError(f"{folder} is not a complete drafter folder: {name} is missing")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
        trained_for, found_kind, settings = config["target"], config["kind"], config["settings"]
    except (ValueError, KeyError) as error:
        raise DrafterWeightsError(f"{folder / CONFIG_FILE} is not a drafter config ({error})") from error
    if found_kind != kind:
        raise DrafterWeightsError(f"{folder} holds a {found_kind} drafter, not {kind}")
    check_trained_for(folder, trained_for, target)
    return settings


def target_record(target: LoadedModel) -> dict:
    """What a weights folder's config records of the target it was trained for (check_trained_for reads it)."""
    facts = target.facts
    return {
        "spec": target.spec,
        "fingerprint": target.fingerprint,
        "vocab_size": facts.vocab_size,
        "hidden_size": facts.hidden_size,
        "num_layers": facts.num_layers,
    }


def check_trained_for(folder: Path, trained_for: dict, target: LoadedModel) -> None:
    """A DrafterWeightsError unless the target_record `trained_for` of `folder` fits `target`: the same
    vocabulary and hidden sizes, and the same fingerprint where it names one."""
    facts = target.facts
    if (trained_for.get("vocab_size"), trained_for.get("hidden_size")) != (facts.vocab_size, facts.hidden_size):
        raise DrafterWeightsError(
            f"{folder} was trained for a target with vocabulary {trained_for.get('vocab_size')} and hidden size "
            f"{trained_for.get('hidden_size')}; '{target.spec}' has {facts.vocab_size} and {facts.hidden_size}"
        )
    if trained_for.get("fingerprint") and trained_for["fingerprint"] != target.fingerprint:
        raise DrafterWeightsError(
            f"{folder} was trained for another target ('{trained_for.get('spec')}', "
            f"fingerprint {trained_for['fingerprint'][:12]}), not '{target.spec}'"
        )


def read_vocabulary(folder: Path, vocab_size: int) -> torch.Tensor | None:
    """The folder's d2t [Vd] (on the CPU), or None when the head drafts over the whole vocabulary."""
    if not (folder / VOCAB_FILE).is_file():
        return None
    d2t = load_file(str(folder / VOCAB_FILE))["d2t"]
    if d2t.ndim != 1 or int(d2t.min()) < 0 or int(d2t.max()) >= vocab_size:
        raise DrafterWeightsError(
            f"{folder / VOCAB_FILE} maps draft tokens outside the target's vocabulary of {vocab_size}"
        )
    return d2t


class TrainedDrafter:
    """The Drafter base of every trained kind: a head, the hidden states it reads, and loading from a folder.
    A kind sets `name`, `head_class` and defines `start` and `cost`."""

    name: str
    head_class: type[TrainedHead]
    free_to_propose = False

    def __init__(self, target: LoadedModel, head: TrainedHead) -> None:
        self.target, self.head = target, head
        self.target_hidden_layers: tuple[int, ...] = tuple(dict.fromkeys(head.feature_layers))

    @classmethod
    def load(cls, folder: str | Path, target: LoadedModel) -> TrainedDrafter:
        """The drafter of a weights folder (see the module docstring)."""
        return cls(target, load_head(cls.head_class, folder, target))
