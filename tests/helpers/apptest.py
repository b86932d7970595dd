"""What the AppTest page tests share: a page script opened under Streamlit's AppTest (with a timeout long
enough for a run against a real worker), the HTML a page drew, and the tiny model's repetitive prompt
that lookup drafters draft well on."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.helpers.workers import ROOT

TIMEOUT = 120
PROMPT = "w5 w9 w13 w5 w9 w13 w22 w5 w9"


def page(path: str) -> AppTest:
    return AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT)


def html_of(at: AppTest) -> str:
    return "".join(element.proto.body for element in at.html)
