"""The project documents itself: README and docs/ link only to pages and sections that exist, and
neither they nor the `--help` texts send the reader to material a clone does not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkwh.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
# pointers to the research notes this project was built from, which a user's clone does not hold
FOREIGN = re.compile(r"\bspec\b|§|docs/spec\.md|\.\./shared|SEED-\d|\bI-\d+\b")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {_slug(h) for h in HEADING.findall(text)}


def test_docs_pages_exist():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {
        "docs/README.md",
        "docs/tables.md",
        "docs/input-format.md",
        "docs/uncertainty.md",
        "docs/metrics/pca.md",
        "docs/metrics/rotation.md",
        "docs/metrics/plasticity.md",
        "docs/metrics/aggregation.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_resolve_to_pages_and_sections(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no section #{anchor}")
    assert broken == [], f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_pages_explain_in_their_own_words(page: Path):
    hits = [line for line in page.read_text().splitlines() if FOREIGN.search(line)]
    assert hits == []


def test_help_texts_cite_the_projects_docs_only():
    runner = CliRunner()
    names = [None, *sorted(c.name or c.callback.__name__ for c in app.registered_commands)]
    for name in names:
        r = runner.invoke(app, [name, "--help"] if name else ["--help"], terminal_width=200)
        assert r.exit_code == 0, r.output
        assert not FOREIGN.search(r.output), (
            f"qkwh {name or ''} --help: {FOREIGN.search(r.output).group(0)}"
        )


# The dbt project ships to users (its descriptions render in `qkwh docs`), so it holds to the same
# rule as the pages; so do the package's docstrings and comments, where `spec` is also an ordinary
# variable name (a source or chart spec) and only section signs and note ids count.
DBT_FILES = sorted(
    p
    for p in (REPO / "dbt_project").rglob("*")
    if p.suffix in {".yml", ".sql", ".md", ".csv"}
    and not {"target", "logs", "dbt_packages"} & set(p.relative_to(REPO).parts)
)
FOREIGN_IN_CODE = re.compile(r"§|docs/spec\.md|\.\./shared|SEED-\d|\bI-\d+\b")


def test_dbt_project_explains_in_its_own_words():
    assert any(p.name == "_seeds.yml" for p in DBT_FILES)
    hits = [
        f"{p.relative_to(REPO)}:{i}"
        for p in DBT_FILES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if FOREIGN.search(line)
    ]
    assert hits == []


def test_package_sources_cite_no_foreign_notes():
    files = sorted((REPO / "qkwh").rglob("*.py")) + sorted((REPO / "qkwh").rglob("*.sql"))
    assert files
    hits = [
        f"{p.relative_to(REPO)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if FOREIGN_IN_CODE.search(line)
    ]
    assert hits == []


def test_readme_command_table_is_generated_from_the_cli():
    from qkwh.cli import commands_markdown

    assert commands_markdown() in (REPO / "README.md").read_text(), (
        "README's command table drifted from the CLI: paste the output of "
        "python -c 'from qkwh.cli import commands_markdown; print(commands_markdown())'"
    )


def test_readme_leads_and_the_rest_is_in_docs():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    headings = HEADING.findall(re.sub(r"```.*?```", "", text, flags=re.DOTALL))
    for section in ("Install", "The demo", "First queries", "The pipeline", "CLI", "Exit codes"):
        assert section in headings
    for page in ("capture", "ingest", "compute", "scaling-out", "querying", "reports"):
        assert f"(docs/{page}.md" in text and (REPO / "docs" / f"{page}.md").is_file()
    assert "(bench/README.md)" in text
