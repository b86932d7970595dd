"""The draft mechanisms, one file each, and the one place that builds them by name.

`none` means no drafter: plain decoding, the baseline. Everything else implements the protocol in
`base.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backend.drafters.base import Drafter
from backend.drafters.draft_model import DraftModelDrafter
from backend.drafters.layerskip import LayerSkipDrafter
from backend.drafters.ngram import NgramDrafter
from backend.drafters.suffix import SuffixDrafter
from backend.errors import SpecScopeError
from backend.models import LoadedModel, load_model

DRAFTER_NAMES = ("none", "ngram", "suffix", "draft-model", "layerskip")


@dataclass(frozen=True)
class DrafterOptions:
    ngram_min: int = 1
    ngram_max: int = 4
    suffix_max_depth: int = 24
    suffix_max_spec_factor: float = 1.0
    suffix_min_token_prob: float = 0.1
    layerskip_exit_layer: int | None = None  # default: half the target's layers
    draft_model: str | None = None  # model spec of the external draft


def build_drafter(name: str, target: LoadedModel, options: DrafterOptions = DrafterOptions(),
                  load: Callable[..., LoadedModel] = load_model) -> Drafter | None:
    """Build a drafter for `target` by name; `load` loads an external draft model (same device)."""
    tle = target.tle_per_forward
    if name == "none":
        return None
    if name == "ngram":
        return NgramDrafter(tle, options.ngram_min, options.ngram_max)
    if name == "suffix":
        return SuffixDrafter(tle, options.suffix_max_depth, options.suffix_max_spec_factor,
                             min_token_prob=options.suffix_min_token_prob)
    if name == "layerskip":
        return LayerSkipDrafter(target, options.layerskip_exit_layer)
    if name == "draft-model":
        if not options.draft_model:
            raise SpecScopeError("the draft-model drafter needs a draft model: pass --draft-model SPEC "
                                 "(a Hugging Face id, a folder or a .gguf file sharing the target's tokenizer)")
        draft = load(options.draft_model, device=str(target.device), dtype=_dtype_name(target))
        return DraftModelDrafter(target, draft)
    raise SpecScopeError(f"unknown drafter '{name}': choose one of {', '.join(DRAFTER_NAMES)}")


def _dtype_name(model: LoadedModel) -> str:
    return str(model.dtype).removeprefix("torch.")
