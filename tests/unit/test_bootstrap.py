"""tools/bootstrap.sh, which every make target runs first: what it refuses before it installs anything."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_in_a_checkout_whose_path_has_a_space_refuses_at_once_naming_the_reason(tmp_path):
    checkout = tmp_path / "my projects" / "onceflow"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", checkout)
    shutil.copy(ROOT / "tools" / "bootstrap.sh", checkout / "tools")
    # A JAVA_HOME without Java: were the space let through, the next check stops the script before it installs.
    done = subprocess.run(["make", "test"], cwd=checkout, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "JAVA_HOME": str(tmp_path / "no-java")})
    assert done.returncode != 0
    assert f"the checkout's path '{checkout}' has a space in it" in done.stderr, done.stderr
    assert "spark-submit" in done.stderr and "without spaces" in done.stderr
    assert sorted(p.name for p in checkout.iterdir()) == ["Makefile", "tools"]  # nothing was installed
