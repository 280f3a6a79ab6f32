"""The documentation site: API pages cover every public name, the site builds without a warning,
and it works opened from the file system as well as served: every link names a file, nothing is
fetched from the network, and search (offline too) finds the PyTorch names on the page that says
what to write instead."""

from __future__ import annotations

import functools
import html.parser
import importlib.util
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip(
    "mkdocs", reason="the docs extra (mkdocs-material, mkdocstrings) builds the site"
)


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
        html = (site / "api" / f"{key}.html").read_text()
        anchors = set(re.findall(r'id="([\w.]+)"', html))
        names = gen.public_names(modname)
        assert names
        missing = [n for n in names if f"{modname}.{n}" not in anchors]
        assert missing == [], f"{modname}: {missing}"


def test_the_site_has_the_guides(site):
    for page in ("tutorial", "design", "from_pytorch", "api/utils"):
        assert (site / f"{page}.html").exists()
    home = (site / "index.html").read_text()
    assert (
        "tape" in home and 'href="design.html' in home
    )  # the README, its links made site-relative


# -- the site from the file system: links that name files, nothing from the network -------------


class _Refs(html.parser.HTMLParser):
    """The ids a page defines and the URLs it refers to (links, scripts, styles, images)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k == "id" and v:
                self.ids.add(v)
            if k in ("href", "src") and v is not None:
                self.refs.append((tag, k, v))


def _pages(site: Path) -> dict[Path, _Refs]:
    out = {}
    for page in sorted(site.rglob("*.html")):
        parser = _Refs()
        parser.feed(page.read_text(encoding="utf-8"))
        out[page] = parser
    return out


def test_every_relative_link_names_a_file_and_its_anchor(site):
    """Opened from the file system a link to a directory shows a listing: every relative URL
    must name a file that exists, and a fragment an id on that page."""
    pages = _pages(site)
    bad = []
    for page, refs in pages.items():
        for tag, attr, url in refs.refs:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme or parts.netloc:
                continue  # absolute: checked below
            path = urllib.parse.unquote(parts.path)
            where = f"{page.relative_to(site)}: <{tag} {attr}={url!r}>"
            if path.startswith("/") and page.name != "404.html":  # (a server's error page)
                bad.append(f"{where} is absolute: from the file system it leaves the site")
                continue
            base = site if path.startswith("/") else page.parent
            target = (base / path.lstrip("/")).resolve() if path else page
            if not target.is_file():
                bad.append(f"{where} names no file")
            elif parts.fragment and target in pages:
                if urllib.parse.unquote(parts.fragment) not in pages[target].ids:
                    bad.append(f"{where}: no id {parts.fragment!r} there")
    assert len(pages) > 10
    assert bad == [], "\n".join(bad[:20])


def test_the_site_fetches_nothing_from_the_network(site):
    """Scripts, styles and fonts are files of the site (offline, file:// or a server)."""
    remote = []
    for page, refs in _pages(site).items():
        for tag, attr, url in refs.refs:
            if tag in ("script", "link", "img", "iframe") and urllib.parse.urlsplit(url).netloc:
                if tag == "link" and "stylesheet" not in _link_rel(page, url):
                    continue  # a link to a page, not a resource
                remote.append(f"{page.relative_to(site)}: <{tag} {attr}={url!r}>")
    assert remote == [], "\n".join(remote[:20])


def _link_rel(page: Path, url: str) -> str:
    m = re.search(r"<link[^>]*href=\"" + re.escape(url) + r"\"[^>]*>", page.read_text())
    return m.group(0) if m else ""


# -- search: the index (the offline script and the JSON) and the words it is split into ---------

# each PyTorch name and the page that says what to write instead
_PYTORCH_NAMES = {
    "zero_grad": "from_pytorch.html",
    "backward": "from_pytorch.html",
    "clip_grad_norm_": "from_pytorch.html",
    "autocast": "from_pytorch.html",
}


def _search_index(site: Path) -> dict:
    index = json.loads((site / "search" / "search_index.json").read_text())
    script = (site / "search" / "search_index.js").read_text()  # what file:// pages load
    prefix = "var __index = "
    assert script.startswith(prefix)
    assert json.loads(script[len(prefix) :]) == index
    return index


def _words(index: dict, doc: dict) -> set[str]:
    """The words the search splits a section into (its configured separator, lower case)."""
    text = re.sub(r"<[^>]+>", " ", doc["title"] + " " + doc["text"])
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return {w.lower() for w in re.split(index["config"]["separator"], text) if w}


@pytest.mark.parametrize("name", sorted(_PYTORCH_NAMES))
def test_the_search_index_has_each_pytorch_name_on_its_page(site, name):
    index = _search_index(site)
    page = _PYTORCH_NAMES[name]
    hits = sorted({d["location"].split("#")[0] for d in index["docs"] if name in _words(index, d)})
    assert page in hits, f"{name!r} is a word of {hits}, not of {page}"
    # and it is in a section title there, where the search weighs a match most
    titles = [d for d in index["docs"] if d["location"].startswith(page + "#")]
    assert any(name in _words(index, {"title": d["title"], "text": ""}) for d in titles)


# -- search in a browser (optional: skipped without Chromium) ------------------------------------

_CHROMIUM = next(
    (
        b
        for b in ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome")
        if shutil.which(b)
    ),
    None,
)
# poll the page until the search has answered (or 20 s); the result pages, best first
_RESULTS_JS = """new Promise(done => { const t0 = Date.now(); (function poll() {
  const meta = document.querySelector('.md-search-result__meta');
  const links = [...document.querySelectorAll('.md-search-result__link')].map(a => a.href);
  if ((meta && /match/i.test(meta.textContent)) || Date.now() - t0 > 20000)
    done(JSON.stringify({meta: meta ? meta.textContent : null, links}));
  else setTimeout(poll, 50); })(); })"""


class _Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4): no
    WebDriver, no package."""

    def __init__(self, binary: str, profile: str) -> None:
        r3, self._w = os.pipe()
        self._r, w4 = os.pipe()
        import fcntl  # noqa: PLC0415 - POSIX only, like the test

        hr, hw = fcntl.fcntl(r3, fcntl.F_DUPFD, 10), fcntl.fcntl(w4, fcntl.F_DUPFD, 10)
        os.close(r3)
        os.close(w4)
        place = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", place + "os.execvp(sys.argv[3], sys.argv[3:])", str(hr),
             str(hw), binary, *args, f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(hr, hw), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(hr)
        os.close(hw)
        self._buf, self._n, self._session = b"", 0, None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")

    def _next(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser exited")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, **params: object) -> dict:
        self._n += 1
        msg: dict = {"id": self._n, "method": method, "params": params}
        if self._session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self._session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            m = self._next(deadline)
            if m.get("id") == self._n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def search(self, url: str) -> dict:
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while self._next(deadline).get("method") != "Page.loadEventFired":
            pass
        r = self.call("Runtime.evaluate", expression=_RESULTS_JS, awaitPromise=True,
                      returnByValue=True)  # fmt: skip
        return json.loads(r["result"]["value"])

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.proc.wait(timeout=20)
        except Exception:  # noqa: BLE001 - it is stopped below
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self._w)
            os.close(self._r)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow  # about 10 s: two page loads per name
@pytest.mark.skipif(
    _CHROMIUM is None, reason="no Chromium (apt install chromium) for the browser test"
)
def test_search_in_a_browser_from_the_file_system_and_from_a_server(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    bases = {
        "file": (site / "index.html").as_uri(),
        "server": f"http://127.0.0.1:{server.server_address[1]}/index.html",
    }
    with tempfile.TemporaryDirectory() as profile:
        browser = _Browser(_CHROMIUM, profile)
        try:
            for how, base in bases.items():
                for name, page in _PYTORCH_NAMES.items():
                    got = browser.search(f"{base}?q={name}")
                    pages = [u for u in got["links"] if "#" not in u]
                    top = [urllib.parse.urlsplit(u).path.rsplit("/", 1)[-1] for u in pages[:3]]
                    assert page in top, f"{how}: searching {name!r} gave {got['meta']!r}, {top}"
                    if how == "file":
                        assert all(u.startswith("file://") and u.endswith(".html") for u in pages)
        finally:
            browser.close()
            server.shutdown()
            server.server_close()
            thread.join()
