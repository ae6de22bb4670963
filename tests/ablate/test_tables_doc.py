"""docs/tables.md documents every ablation table and column, from the declarations."""

from __future__ import annotations

from qkwh import generate
from qkwh.ablate.tables import TABLES


def test_tables_md_has_every_ablation_column():
    text = generate.TABLES_MD.read_text()
    part = text.partition(generate.ABLATION_DOCS_MARKER)[2].partition(generate.DOCS_END)[0]
    for table in TABLES:
        section = part.partition(f"### `{table.name}`")[2].partition("### ")[0]
        assert section, f"{table.name} is missing from docs/tables.md"
        for c in table.columns:
            assert f"| `{c.name}` | {c.type.replace('|', chr(92) + '|')} |" in section, (
                table.name,
                c.name,
            )
    assert part.strip("\n") == generate.ablation_docs_part().strip("\n")
