"""Where the browser tests find chromium (Debian's, never a downloaded one) and put screenshots, and the
marks every browser test module takes (`pytestmark = BROWSER_TEST`): slow (it drives the real default
model), skipped where chromium is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.workers import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "screenshots"
BROWSER_TEST = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)"
    ),
]
