"""tapegrad raises glibc's malloc thresholds on import, unless told not to (see _malloc.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = "import tapegrad, tapegrad._malloc as m; print(m.tuned)"


def _tuned(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "TAPEGRAD_"))}
    out = subprocess.run(
        [sys.executable, "-c", CODE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_tuned_by_default_on_glibc():
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert _tuned() == "True"


def test_opt_out_and_user_settings_win():
    assert _tuned(TAPEGRAD_TUNE_MALLOC="0") == "False"
    assert _tuned(MALLOC_MMAP_THRESHOLD_="131072") == "False"
