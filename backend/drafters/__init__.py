"""The draft mechanisms, one file each, and the one place that builds them by name.

`none` means no drafter: plain decoding, the baseline. Everything else implements the protocol in
`base.py`. The trained kinds (eagle3, mtp, dflash, dspark) load a weights folder: the one given in
the options, else the folder under data/drafters/ ($SPECSCOPE_DRAFTERS) trained for this very target
(its fingerprint). The draft-model drafter loads the draft model given in the options, else the student
distilled for this target found there (a Hugging Face folder whose config.json names its target).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.core.drafter import Drafter
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, load_model
from backend.drafters.dflash import DFlashDrafter
from backend.drafters.draft_model import DraftModelDrafter
from backend.drafters.dspark import DSparkDrafter
from backend.drafters.eagle3 import Eagle3Drafter
from backend.drafters.layerskip import LayerSkipDrafter
from backend.drafters.mtp import MtpDrafter
from backend.drafters.ngram import NgramDrafter
from backend.drafters.suffix import SuffixDrafter

TRAINED = {"eagle3": Eagle3Drafter, "mtp": MtpDrafter, "dflash": DFlashDrafter, "dspark": DSparkDrafter}
DISTILLED_DRAFT = "draft-model"  # the kind of a distilled student, a whole HF model folder
STUDENT_MARKER = "specscope_drafter"  # the key in a student's config.json naming its kind and target
DRAFTER_NAMES = ("none", "ngram", "suffix", "draft-model", "layerskip", *TRAINED)
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "drafters"


@dataclass(frozen=True)
class DrafterOptions:
    ngram_min: int = 1
    ngram_max: int = 4
    suffix_max_depth: int = 24
    suffix_max_spec_factor: float = 1.0
    suffix_min_token_prob: float = 0.1
    layerskip_exit_layer: int | None = None  # default: half the target's layers
    draft_model: str | None = None  # model spec of the external draft
    drafter_path: str | None = None  # weights folder of a trained drafter (default: the shipped one)


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
    if name == DISTILLED_DRAFT:
        spec = options.draft_model or options.drafter_path or trained_folders(target).get(DISTILLED_DRAFT)
        if not spec:
            raise SpecScopeError("the draft-model drafter needs a draft model: pass --draft-model SPEC (a Hugging "
                                 "Face id, a folder or a .gguf file sharing the target's tokenizer), or distil one "
                                 f"with `python -m backend train --kind draft-model --target {target.spec} --out "
                                 "data/drafters/draft-model-NAME`")
        draft = load(str(spec), device=str(target.device), dtype=_dtype_name(target))
        return DraftModelDrafter(target, draft)
    if name in TRAINED:
        folder = options.drafter_path or trained_folders(target).get(name)
        if folder is None:
            raise SpecScopeError(f"no trained {name} drafter for '{target.spec}': train one with `python -m backend "
                                 f"train --kind {name} --target {target.spec} --out data/drafters/{name}-NAME`, or "
                                 "give its folder with --drafter-path")
        return TRAINED[name].load(folder, target)
    raise SpecScopeError(f"unknown drafter '{name}': choose one of {', '.join(DRAFTER_NAMES)}")


def trained_folders(target: LoadedModel, root: Path | None = None) -> dict[str, Path]:
    """The weights folders under `root` (default $SPECSCOPE_DRAFTERS, else data/drafters/) trained for this
    target (same fingerprint), by kind; a distilled student's record sits under STUDENT_MARKER."""
    root = root or Path(os.environ.get("SPECSCOPE_DRAFTERS", SHIPPED_DIR))
    found = {}
    for config in sorted(root.glob("*/config.json")):
        try:
            record = json.loads(config.read_text())
        except ValueError:
            continue
        record = record.get(STUDENT_MARKER, record)
        kind = record.get("kind")
        if (kind in TRAINED or kind == DISTILLED_DRAFT) and record.get("target", {}).get("fingerprint") == \
                target.fingerprint:
            found.setdefault(kind, config.parent)
    return found


def _dtype_name(model: LoadedModel) -> str:
    return str(model.dtype).removeprefix("torch.")
