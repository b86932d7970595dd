"""Where the browser tests find chromium (Debian's, never a downloaded one) and put screenshots."""

from __future__ import annotations

import shutil

from tests.helpers.workers import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "screenshots"
