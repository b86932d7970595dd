"""The drafter registry: every draft mechanism, one line each, and the one place that builds them by name.

Each mechanism is one file in this package ending with its `SPEC` (spec.py): name, options with bounds
and help, build function, and whether it needs trained weights. The CLI flags, the worker's request
model, `/models`, the dashboard's drafter list and options, and the losslessness tests all read REGISTRY,
so adding a drafter is one file and one line below. `none` means no drafter: plain decoding, the baseline.

The trained kinds load a weights folder: the one given in the options, else the folder under
data/drafters/ ($SPECSCOPE_DRAFTERS) trained for this very target (shipped.py).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping

from backend.core.drafter import Drafter
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, load_model
from backend.drafters.shipped import DISTILLED_DRAFT, SHIPPED_DIR, STUDENT_MARKER, trained_folders
from backend.drafters.spec import DrafterSpec, LoadModel, OptionInfo


def _registry(*modules: str) -> dict[str, DrafterSpec]:
    specs = [importlib.import_module(f"{__name__}.{module}").SPEC for module in modules]
    return {spec.name: spec for spec in specs}


# one line per drafter: the module in this package whose SPEC describes it (dashboard order)
REGISTRY: dict[str, DrafterSpec] = _registry(
    "suffix",
    "ngram",
    "draft_model",
    "layerskip",
    "eagle3",
    "mtp",
    "dflash",
    "dspark",
)

PLAIN = "none"
DRAFTER_NAMES = (PLAIN, *REGISTRY)
TRAINED = tuple(name for name, spec in REGISTRY.items() if spec.trained)
TREE_DRAFTERS = tuple(name for name, spec in REGISTRY.items() if spec.trees)


def check_tree_budget(name: str, tree_budget: int) -> None:
    """Raise unless drafter `name` can draft a token tree of `tree_budget` nodes (0: a chain, any drafter)."""
    if tree_budget > 0 and name not in TREE_DRAFTERS:
        raise SpecScopeError(
            f"drafter '{name}' drafts no token trees: set the tree budget to 0 (trees: {', '.join(TREE_DRAFTERS)})"
        )


def all_options() -> list[OptionInfo]:
    """Every drafter's options, each name once; a name two drafters share must mean the same option."""
    seen: dict[str, OptionInfo] = {}
    for spec in REGISTRY.values():
        for info in spec.option_infos():
            if seen.setdefault(info.name, info) != info:
                raise TypeError(f"option '{info.name}' is declared differently by two drafters")
    return list(seen.values())


def _options_class() -> type:
    fields = [
        (info.name, info.kind | None if info.optional else info.kind, dataclasses.field(default=info.default))
        for info in all_options()
    ]
    record = dataclasses.make_dataclass("DrafterOptions", fields, frozen=True)
    record.__module__ = __name__
    record.__doc__ = "Every registered drafter's options in one frozen record (CLI flags, request fields)."
    return record


DrafterOptions = _options_class()


def options_for(name: str, options: DrafterOptions | Mapping | None = None):
    """The options instance of drafter `name`, taken from the flat record or mapping (other drafters' fields
    are ignored)."""
    spec = REGISTRY[name]
    values = dataclasses.asdict(options) if dataclasses.is_dataclass(options) else dict(options or {})
    wanted = {f.name for f in dataclasses.fields(spec.options)}
    return spec.options(**{key: value for key, value in values.items() if key in wanted})


def build_drafter(
    name: str, target: LoadedModel, options: DrafterOptions | Mapping | None = None, load: LoadModel = load_model
) -> Drafter | None:
    """Build a drafter for `target` by name; `load` loads an external draft model (same device)."""
    if name == PLAIN:
        return None
    if name not in REGISTRY:
        raise SpecScopeError(f"unknown drafter '{name}': choose one of {', '.join(DRAFTER_NAMES)}")
    return REGISTRY[name].build(target, options_for(name, options), load)


def available_drafters(target: LoadedModel | None) -> dict[str, str | None]:
    """The drafters usable with `target`, with the weights folder each trained one would load (None for
    the rest); trained kinds without weights for this target are left out."""
    folders = trained_folders(target) if target is not None else {}
    return {
        PLAIN: None,
        **{
            name: str(folders[name]) if name in folders else None
            for name, spec in REGISTRY.items()
            if not spec.trained or name in folders
        },
    }


__all__ = [
    "DISTILLED_DRAFT",
    "DRAFTER_NAMES",
    "PLAIN",
    "REGISTRY",
    "SHIPPED_DIR",
    "STUDENT_MARKER",
    "TRAINED",
    "DrafterOptions",
    "all_options",
    "available_drafters",
    "build_drafter",
    "check_tree_budget",
    "options_for",
    "trained_folders",
]
