"""The figure catalogue is declared by the figure modules: a figure (and a section) declared in a
test reaches the rendered report without editing any file, and leaves the catalogue as it was."""

from __future__ import annotations

import altair as alt
import pytest

from qkwh.errors import QkwhError
from qkwh.reports.base import Drawn, Marts
from qkwh.reports.catalogue import catalogue, figure, registered, section, sections, select
from qkwh.reports.render import render


def _toy_chart(marts: Marts) -> Drawn:
    rows = marts.rows("model_summary")
    data = [{"model_id": r["model_id"], "n": r["n_heads"]} for r in rows]
    chart = alt.Chart(alt.Data(values=data)).mark_bar().encode(x="n:Q", y="model_id:N")
    return Drawn(chart, "Toy bars.")


def test_every_module_of_the_package_declares_its_figures():
    keys = [f.key for f in catalogue()]
    assert len(keys) == len(set(keys)) and len(keys) >= 35
    # page order: by section, and every figure's section is declared
    assert list(dict.fromkeys(f.section for f in catalogue())) == [
        s for s in sections() if any(f.section == s for f in catalogue())
    ]
    assert sections()[:3] == ("PCA", "Rotation", "Plasticity")


def test_a_figure_declared_in_a_test_is_registered_and_then_gone():
    before = catalogue()
    with registered():
        name = section("Toy section", order=35)
        figure(
            "toy-bars",
            section=name,
            title="Toy bars",
            caption="A toy figure.",
            sources=("model_summary",),
        )(_toy_chart)
        keys = [f.key for f in catalogue()]
        assert "toy-bars" in keys
        # sections order the figures: order 35 sits between Plasticity (30) and RoPE bands (40)
        assert sections().index("Toy section") == sections().index("Plasticity") + 1
        assert [f.key for f in select(["toy"])] == ["toy-bars"]
    assert catalogue() == before
    with pytest.raises(QkwhError, match="no figure 'toy'"):
        select(["toy"])


def test_an_undeclared_section_or_a_conflicting_one_is_refused():
    with registered():
        figure("toy-x", section="Nowhere", title="t", caption="c", sources=("model_summary",))(
            _toy_chart
        )
        with pytest.raises(QkwhError, match=r"undeclared section.*'Nowhere'"):
            catalogue()
    with registered():
        section("Toy", order=1)
        with pytest.raises(ValueError, match="declared twice"):
            section("Toy", order=2)


def test_a_registered_figure_reaches_the_report(report_warehouse, tmp_path):
    with registered():
        section("Toy section", order=99)
        figure(
            "toy-bars",
            section="Toy section",
            title="Toy bars",
            caption="A toy figure.",
            sources=("model_summary",),
        )(_toy_chart)
        r = render(report_warehouse, out=tmp_path / "rep", figures=["toy-bars", "pca-taxonomy"])
    assert [f.id for f in r.figures] == ["pca-taxonomy", "toy-bars"]
    toy = r.figures[1]
    assert toy.caption == "A toy figure. Toy bars." and toy.section == "Toy section"
    page = r.index.read_text(encoding="utf-8")
    assert 'id="section-toy-section"' in page and 'id="fig-toy-bars"' in page
