"""The fixture report in a real browser (headless Debian Chromium driven by Playwright): on the
index and on every model page, every chart draws marks, the console shows no error, and nothing
is fetched from the network (vega.js comes from the report folder, over file://).

Needs Debian's chromium (`apt-get install chromium`; `.ci/run` installs it).  Playwright's own
browser download (`playwright install`) is never used: the system binary is launched directly.
Set QKWH_SCREENSHOT_DIR to keep the screenshots (page and one per figure) for a look.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
]  # renders the whole report, then Chromium draws it

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SKIP_MESSAGE = "chromium not found: apt-get install chromium (Debian) to run the browser test"

# Number of drawn data-mark items per figure, from each Vega view's scenegraph (role 'mark' only:
# axes, legends and titles do not count).
COUNT_MARKS_JS = """
() => {
  function count(node) {
    if (!node) return 0;
    if (node.marktype === 'group') {
      let n = 0;
      for (const item of node.items || []) for (const child of item.items || []) n += count(child);
      return n;
    }
    return node.role === 'mark' ? (node.items || []).length : 0;
  }
  function tips(node, keys) {
    if (!node) return;
    if (node.marktype === 'group') {
      for (const item of node.items || []) for (const child of item.items || []) tips(child, keys);
      return;
    }
    if (node.role !== 'mark') return;
    for (const it of node.items || [])
      if (it.tooltip && typeof it.tooltip === 'object') Object.keys(it.tooltip).forEach(k => keys.add(k));
  }
  const marks = {}, tooltips = {};
  for (const [id, view] of Object.entries(window.qkwhReport.views)) {
    marks[id] = count(view.scenegraph().root);
    const keys = new Set();
    tips(view.scenegraph().root, keys);
    tooltips[id] = [...keys];
  }
  return {marks, tooltips, errors: window.qkwhReport.errors, total: window.qkwhReport.total};
}
"""
# Ids of the figure cards wider than their place on the page (they would scroll sideways).
OVERFLOW_JS = """
() => [...document.querySelectorAll('figure.fig')]
        .filter(f => f.scrollWidth > f.clientWidth + 1).map(f => f.id)
"""
# Figures whose marks are heads or rows of one head: the tooltip names model and head (label
# L<layer>H<query head>); the scatter plots of head metrics also give layer and head numbers.
HEAD_LEVEL = (
    "pca-rq-rk-scatter",
    "rot-bias-vs-separation",
    "ap-head-profiles",
    "pca-collage",
    "rot-ab-collage",
    "rot-complement-collage",
    "ap-gauss-vs-empirical",
)
HEAD_NUMBERS = (
    "pca-rq-rk-scatter",
    "rot-bias-vs-separation",
    "ap-head-profiles",
    "ap-gauss-vs-empirical",
)


def _chromium() -> str | None:
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if not exe:
        pytest.skip(SKIP_MESSAGE)
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright not installed: pip install -e '.[test]'"
    )
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def test_every_chart_draws_without_console_errors_or_network(browser, fixture_report, tmp_path):
    shots = Path(os.environ.get("QKWH_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    network: list[str] = []

    def block(route):
        network.append(route.request.url)
        route.abort()

    context.route("http://**/*", block)
    context.route("https://**/*", block)
    console: list[tuple[str, str]] = []
    page_errors: list[str] = []
    state = {"marks": {}, "tooltips": {}, "errors": [], "total": 0}
    overflow: dict[str, list[str]] = {}
    try:
        for html in (fixture_report.index, *fixture_report.model_pages):
            page = context.new_page()
            page.on("console", lambda msg: console.append((msg.type, msg.text)))
            page.on("pageerror", lambda exc: page_errors.append(str(exc)))
            page.on(
                "request",
                lambda req: (
                    network.append(req.url) if req.url.startswith(("http:", "https:")) else None
                ),
            )
            page.goto(html.as_uri(), wait_until="load")
            page.wait_for_function(
                "window.qkwhReport && window.qkwhReport.ready === true", timeout=60_000
            )
            got = page.evaluate(COUNT_MARKS_JS)
            if html == fixture_report.index:  # every card fits a 1400 px window (no scrolling)
                overflow[html.name] = page.evaluate(OVERFLOW_JS)
            for key in ("marks", "tooltips"):
                state[key].update(got[key])
            state["errors"] += got["errors"]
            state["total"] += got["total"]
            page.screenshot(path=str(shots / f"{html.stem}.png"), full_page=True)
            for f in fixture_report.figures:
                if f.page == html:
                    page.locator(f"#fig-{f.id}").screenshot(path=str(shots / f"{f.id}.png"))
            page.close()
    finally:
        context.close()

    ids = [f.id for f in fixture_report.figures]
    assert state["errors"] == []
    assert state["total"] == len(ids)
    assert sorted(state["marks"]) == sorted(ids), "some figures have no Vega view"
    empty = [fid for fid, n in state["marks"].items() if n <= 0]
    assert empty == [], f"charts without marks: {empty}"
    for fid, keys in state["tooltips"].items():
        # every tooltip names the model by its label and its id
        assert "model" in keys and "model id" in keys, (fid, keys)
        if fid.startswith(HEAD_LEVEL):
            assert "head" in keys, (fid, keys)
        if fid.startswith(HEAD_NUMBERS):
            assert "layer" in keys and "query head" in keys, (fid, keys)
    errors = [text for kind, text in console if kind == "error"]
    assert errors == [], errors
    assert page_errors == []
    assert network == [], f"the report tried to reach the network: {network}"
    assert overflow == {"index.html": []}, overflow
    print(f"screenshots: {shots}")


def test_hostile_labels_do_not_break_a_page(browser, hostile_report):
    """Labels, a family and a dataset name holding `</script><!--<script>`: every page still
    draws every one of its figures, with no error."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    try:
        for html in (hostile_report.index, *hostile_report.model_pages):
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
            page.goto(html.as_uri(), wait_until="load")
            page.wait_for_function(
                "window.qkwhReport && window.qkwhReport.ready === true", timeout=60_000
            )
            got = page.evaluate(COUNT_MARKS_JS)
            want = sorted(f.id for f in hostile_report.figures if f.page == html)
            assert got["errors"] == [] and errors == [], (html.name, got["errors"], errors)
            assert got["total"] == len(want) and sorted(got["marks"]) == want, html.name
            assert all(n > 0 for n in got["marks"].values()), got["marks"]
            page.close()
    finally:
        context.close()
