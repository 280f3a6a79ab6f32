"""The documentation site: API pages cover every public name and the site builds without a warning."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="the docs extra (mkdocs-material, mkdocstrings) builds the site")


def _gen_api():
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_api_pages_match_the_generator():
    gen = _gen_api()
    for key in gen.PAGES:
        committed = (ROOT / "docs" / "api" / f"{key}.md").read_text()
        assert committed == gen.page(key), f"docs/api/{key}.md is stale: run python docs/gen_api.py"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_every_public_name_has_an_entry_in_the_built_site(site):
    gen = _gen_api()
    for key, (modname, _) in gen.PAGES.items():
        html = (site / "api" / key / "index.html").read_text()
        anchors = set(re.findall(r'id="([\w.]+)"', html))
        names = gen.public_names(modname)
        assert names
        missing = [n for n in names if f"{modname}.{n}" not in anchors]
        assert missing == [], f"{modname}: {missing}"


def test_the_site_has_the_guides(site):
    for page in ("tutorial", "design"):
        assert (site / page / "index.html").exists()
    home = (site / "index.html").read_text()
    assert "tape" in home and 'href="design/' in home  # the README, its links made site-relative
