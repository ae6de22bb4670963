"""Report defects found by a fault campaign, each fixed and checked here:

* model ids that make the same file name (``m_x``, ``m-x``, ``M-X``) get their own pages and
  figure ids;
* hostile labels (``</script><!--<script>``) cannot break a page: every inline spec escapes
  ``<``, ``>`` and ``&``;
* a render that is interrupted or hits a full disk leaves the earlier report (or no folder)
  as it was, says so in one line, and the next render into the same folder works;
* depth heatmaps mark the depth bins without heads; the Gaussian-vs-empirical card fits a
  1400 px window; a reason for leaving figures out is printed once.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from qkwh.errors import QkwhError
from qkwh.reports.catalogue import catalogue, only
from qkwh.reports.page import read_specs
from qkwh.reports.render import render
from tests.reports.conftest import HOSTILE, SYNTH, clone_models


class _Scripts(HTMLParser):
    """The raw text of every <script class="vl-spec"> and the figure it belongs to."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: list[tuple[str, str]] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("class") == "vl-spec":
            self._in = a["data-figure"]
            self.specs.append((self._in, ""))

    def handle_data(self, data):
        if self._in is not None:
            fid, text = self.specs[-1]
            self.specs[-1] = (fid, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None


def _scripts(page: Path) -> list[tuple[str, str]]:
    p = _Scripts()
    p.feed(page.read_text(encoding="utf-8"))
    return p.specs


# ------------------------------------------------------------------------------------------
# file names
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collide_warehouse(report_warehouse, tmp_path_factory) -> Path:
    clones = [("m_x", "under", "SmolLM2"), ("m-x", "dash", "SmolLM2"), ("M-X", "upper", "Qwen3")]
    return clone_models(report_warehouse, tmp_path_factory.mktemp("collide") / "c.duckdb", clones)


def test_model_ids_that_look_alike_get_their_own_pages_and_figures(collide_warehouse, tmp_path):
    r = render(
        collide_warehouse, out=tmp_path / "rep", figures=["pca-taxonomy", "ap-heatmap"], strict=True
    )
    assert sorted(r.models) == ["M-X", "m-x", "m_x"]
    pages = {f.model_id: f.page for f in r.figures if f.model_id}
    assert len(pages) == 3 and len(set(pages.values())) == 3, pages
    assert len(r.model_pages) == len(set(r.model_pages)) == 3
    ids = [f.id for f in r.figures]
    assert len(ids) == len(set(ids)) == 4
    # safe ids are their own names; the upper-case one gets a hash, never "m-x"
    assert pages["m_x"].name == "m_x.html" and pages["m-x"].name == "m-x.html"
    assert pages["M-X"].name.startswith("m-x-") and pages["M-X"].name != "m-x.html"
    for m, page in pages.items():
        html = page.read_text(encoding="utf-8")
        assert f"model id <code>{m}</code>" in html
        [(fid, _)] = _scripts(page)
        assert next(f for f in r.figures if f.id == fid).model_id == m
    index = json.loads(r.figure_index.read_text())
    assert len(set(index["pages"].values())) == 4


# ------------------------------------------------------------------------------------------
# hostile labels
# ------------------------------------------------------------------------------------------


def test_hostile_labels_are_escaped_in_every_inline_spec_and_text(hostile_report):
    r = hostile_report
    assert len(r.figures) == 6, ([f.id for f in r.figures], r.skipped)  # 4 + a heatmap each
    for page in (r.index, *r.model_pages):
        html = page.read_text(encoding="utf-8")
        scripts = _scripts(page)
        on_page = [f for f in r.figures if f.page == page]
        assert sorted(fid for fid, _ in scripts) == sorted(f.id for f in on_page), page
        for fid, text in scripts:
            assert not {"<", ">", "&"} & set(text), fid  # as \u003c, \u003e, \u0026
        assert "<!--" not in html and HOSTILE not in html
        assert html.count("<script") == html.count("</script>") == len(scripts) + 2
    specs = read_specs(r.out)
    assert specs == {f.id: json.loads(f.spec) for f in r.figures}
    assert HOSTILE in _strings(specs["toy-hostile"])  # the dataset name, as it was
    assert HOSTILE in _strings(specs["pca-taxonomy"])  # the label, as it was


def _strings(node) -> set[str]:
    if isinstance(node, dict):
        return set().union(*map(_strings, node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*map(_strings, node)) if node else set()
    return {node} if isinstance(node, str) else set()


# ------------------------------------------------------------------------------------------
# interrupted and failed renders
# ------------------------------------------------------------------------------------------


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


FAST = ["pca-taxonomy", "ap-heatmap"]


def test_an_interrupted_render_leaves_the_earlier_report_as_it_was(
    report_warehouse, tmp_path, monkeypatch
):
    import qkwh.reports.render as render_mod

    out = tmp_path / "rep"
    render(report_warehouse, out=out, figures=FAST)
    before = _tree(out)
    assert "index.html" in before and any(k.startswith("models/") for k in before)

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    # Ctrl-C after the index page of the new report is written, before its model pages
    monkeypatch.setattr(render_mod, "model_html", interrupted)
    with pytest.raises(KeyboardInterrupt):
        render(report_warehouse, out=out, figures=["pca-taxonomy", "ap-head-profiles"])
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # nothing left beside


def test_a_full_disk_says_one_line_and_a_rerun_writes_the_same_folder(
    report_warehouse, tmp_path, monkeypatch
):
    from typer.testing import CliRunner

    from qkwh.cli import app

    real = Path.write_text

    def full(self, *a, **kw):
        if self.name == "figures.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *a, **kw)

    out = tmp_path / "rep"
    fig = next(f for f in catalogue() if f.key == "pca-taxonomy")
    with only(fig):
        monkeypatch.setattr(Path, "write_text", full)
        r = CliRunner().invoke(app, ["report", "-w", str(report_warehouse), "-o", str(out)])
        assert r.exit_code == 1, r.output
        assert "Traceback" not in r.output
        [line] = [x for x in r.stderr.splitlines() if x.strip()]  # one line
        assert "No space left on device" in line and str(out) in line
        assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing half-written
        monkeypatch.setattr(Path, "write_text", real)  # space freed
        r = CliRunner().invoke(app, ["report", "-w", str(report_warehouse), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "index.html").is_file() and (out / "figures.json").is_file()


def test_a_render_into_a_folder_of_something_else_is_refused(report_warehouse, tmp_path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "index.html").write_text("mine")  # a page, but no report's figures.json
    with pytest.raises(QkwhError, match="holds no qkwh report"):
        render(report_warehouse, out=tmp_path / "rep", figures=["pca-taxonomy"])
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["index.html"]
    assert (tmp_path / "rep" / "index.html").read_text() == "mine"


@pytest.mark.slow
def test_a_killed_first_report_does_not_block_the_next(report_warehouse, tmp_path):
    """kill -9 while the first report is written; the next `qkwh report` into the same folder
    works, and nothing of the killed one is left beside it."""
    import signal
    import time

    parent = tmp_path / "reports"
    parent.mkdir()
    out = parent / "latest"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "qkwh.cli", "report", "-w", str(report_warehouse), "-o", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    try:  # wait for the report to start writing (its first file appears), then kill it
        while not [p for p in parent.rglob("*") if p.is_file()]:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (out / "index.html").exists() or _tree(out)  # never a half report under out
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in parent.iterdir()] == ["latest"]
    assert (out / "index.html").is_file() and (out / "figures.json").is_file()


# ------------------------------------------------------------------------------------------
# issue 28: depth heatmaps, the Gaussian-vs-empirical card, left-out lines
# ------------------------------------------------------------------------------------------


def test_depth_heatmaps_mark_the_bins_without_heads(fixture_report):
    specs = {f.id: json.loads(f.spec) for f in fixture_report.figures}
    for fid in ("pca-depth-rq0", "pca-depth-rk0", "rot-depth-abs-rka", "rot-depth-bias"):
        spec = specs[fid]
        rows = [r for d in spec["datasets"].values() for r in d]
        values = {(r["model_id"], r["depth_bin"]) for r in rows if "mean_value" in r}
        empty = {(r["model_id"], r["depth_bin"]) for r in rows if r.get("note") == "no heads"}
        models = {m for m, _ in values}
        # the 4-layer model fills 4 of the 10 bins: the other 6 say "no heads"
        assert {k for m, k in values if m == SYNTH} and len(empty) >= 6, fid
        assert not values & empty
        assert values | empty == {(m, k) for m in models for k in range(10)}, fid
        assert '"note"' in json.dumps(spec["layer"][-1]["encoding"]["text"]), fid


def test_the_gaussian_vs_empirical_card_fits_a_1400_px_window(fixture_report):
    import re

    import vl_convert as vlc

    from qkwh.reports.specs import VL_VERSION

    fig = next(f for f in fixture_report.figures if f.id == "ap-gauss-vs-empirical")
    svg = vlc.vegalite_to_svg(json.loads(fig.spec), vl_version=VL_VERSION)
    width = float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1))
    # 1400 px window: main 1336 px wide (32 px padding), the card 1302 px inside its padding,
    # vega-embed keeps 38 px for its menu
    assert width <= 1302 - 38, width


def test_a_reason_for_leaving_figures_out_is_printed_once(report_warehouse, tmp_path):
    from typer.testing import CliRunner

    from qkwh.cli import app

    train = [f for f in catalogue() if f.key.startswith("train-")]
    assert len(train) == 5  # no checkpoints in the fixture: all five left out, one reason
    with only(*train):
        r = CliRunner().invoke(
            app, ["report", "-w", str(report_warehouse), "-o", str(tmp_path / "r")]
        )
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())  # whatever the console width
    assert text.count("left out train") == 1, r.stdout
    assert text.count("no checkpoints ingested") == 1, r.stdout
    assert "left out " + ", ".join(f.key for f in train) + ": no checkpoints" in text
