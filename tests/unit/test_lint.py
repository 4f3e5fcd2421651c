"""The code has no unused imports, undefined names or syntax errors (ruff, pinned)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_ruff_finds_nothing():
    result = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-1000:]
