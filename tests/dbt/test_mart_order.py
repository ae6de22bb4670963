"""Marts and the README's queries give rows in a stable, visible order.

A table that dbt creates from a select without ORDER BY is read back in whatever order the
parallel query produced, which changes between builds; every mart therefore ends with an ORDER BY
of its key.  The README's example queries name the model of each row (without it rows of
different models look duplicated) and order what they return."""

from __future__ import annotations

import re

from qkwh.paths import DBT_PROJECT_DIR

README = DBT_PROJECT_DIR.parent / "README.md"
MARTS_DIR = DBT_PROJECT_DIR / "models" / "marts"


def _last_select(sql: str) -> str:
    body = "\n".join(line.split("--")[0] for line in sql.splitlines())
    body = re.sub(r"\{\{.*?\}\}", "x", body)  # a macro call counts as one expression
    return body[body.lower().rfind("\nselect") :]


def test_every_sql_mart_ends_with_an_order_by():
    unordered = [
        p.name
        for p in sorted(MARTS_DIR.glob("*.sql"))
        if not re.search(r"\border\s+by\b[^()]*$", _last_select(p.read_text()), re.I | re.S)
    ]
    assert unordered == []


def _readme_queries() -> list[str]:
    text = README.read_text()
    return re.findall(r'(?:qkwh sql[^"]*|wh\.sql\()"((?:SELECT|WITH)[^"]+)"', text)


def test_readme_queries_name_the_model_and_order_their_rows():
    queries = _readme_queries()
    assert len(queries) >= 5
    for q in queries:
        if re.search(r"\bFROM (head_\w+|model_summary|head_taxonomy)\b", q):
            assert re.search(r"\bmodel_id\b", q), q
        if "FROM dataset_comparisons" in q or "FROM model_comparisons" in q:
            assert "model_a" in q and "model_b" in q, q
        assert "ORDER BY" in q, q
