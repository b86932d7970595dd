"""Every drafter the registry lists reaches the worker's `/models` (with its options) and the Live page's
drafter list and option widgets; no page keeps its own list of drafters."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from backend.drafters import REGISTRY
from backend.serving.client import WorkerClient
from tests.helpers.workers import ROOT


def test_surfaces_offer_every_registered_drafter(worker_env):
    models = WorkerClient(worker_env.url).models()
    offered = {d["name"]: d for d in models["drafters"]}
    untrained = [name for name, spec in REGISTRY.items() if not spec.trained]  # no weights for the tiny target
    for name in untrained:
        assert offered[name]["available"]
        assert [o["name"] for o in offered[name]["options"]] == [i.name for i in REGISTRY[name].option_infos()]

    at = AppTest.from_file(str(ROOT / "pages" / "live.py"), default_timeout=120).run()
    assert not at.exception
    choices = at.selectbox(key="live_drafter").options
    assert set(untrained) <= set(choices) and "none" in choices
    for name in untrained:
        at.selectbox(key="live_drafter").set_value(name).run()
        for info in REGISTRY[name].option_infos():
            # the widget under the option's key, labelled with the option's label, starting at its default
            # (AppTest raises KeyError when no widget has the key)
            if info.kind is str:
                widget = at.text_input(key=f"live_{info.name}")
                assert widget.value == ""  # empty: the drafter's default, which the label names
            else:
                widget = at.number_input(key=f"live_{info.name}")
                assert widget.value == (0 if info.optional else info.default), (name, info.name)
            assert widget.label.startswith(info.label), (name, info.name, widget.label)
