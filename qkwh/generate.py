"""Files generated from the analysis declarations (:mod:`qkwh.analyses.registry`), checked in.

* ``dbt_project/models/staging/stg_<table>.sql`` -- one staging view per staged analysis table:
  the head, its label, the declared columns (non-finite doubles as NULL), the rows of the
  analysis's current parameter set only; and ``stg_<table>.yml``, its description, columns and
  tests (key, model_id relationship, declared ranges and not-null columns);
* the analysis part of ``dbt_project/models/staging/_sources.yml`` -- each table with its
  description, its columns and the test of its key;
* the analysis part of ``docs/tables.md`` -- each table's grain, key and columns with type,
  unit and meaning; and its ablation part, the same for the tables of ``qkwh ablate``
  (:mod:`qkwh.ablate.tables`);
* the analysis sections of ``configs/run.yaml`` -- each parameter with its default and the
  line of its field's ``metadata["doc"]``;
* ``dbt_project/macros/declared_metrics.sql`` -- the catalogue of model-level metrics
  (:class:`~qkwh.analyses.declaration.ModelMetric`) that the interval models read
  (``declared_metrics()``), the default comparison list (``declared_comparison_metrics()``: the
  dbt var ``comparison_metrics`` overrides it);
* ``qkwh/mart_names.py`` -- the names of the dbt marts (the relations the reports may read).

The catalog, bookkeeping and run-wide parts of these files stay hand-written above a marker
line; only what follows it is generated.  Run ``python -m qkwh.generate`` after changing a declaration
(``--check`` fails when a checked-in file differs: the test suite runs that check).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from qkwh.analyses import registry
from qkwh.analyses.registry import HEAD_KEY, Analysis, ModelMetric, Table
from qkwh.paths import DBT_PROJECT_DIR, DOCS_DIR, RUN_CONFIG_YAML

STAGING_DIR = DBT_PROJECT_DIR / "models" / "staging"
MARTS_DIR = DBT_PROJECT_DIR / "models" / "marts"
METRICS_MACRO = DBT_PROJECT_DIR / "macros" / "declared_metrics.sql"
MART_NAMES_PY = DBT_PROJECT_DIR.parent / "qkwh" / "mart_names.py"
SOURCES_YML = STAGING_DIR / "_sources.yml"
TABLES_MD = DOCS_DIR / "tables.md"
#: the line after which a file's generated part starts (what precedes it is written by hand)
SOURCES_MARKER = "      # -- generated from the analysis declarations (python -m qkwh.generate); do not edit below --"
DOCS_MARKER = (
    "<!-- generated from the analysis declarations (python -m qkwh.generate); do not edit below -->"
)
ABLATION_DOCS_MARKER = "<!-- generated from the ablation table declarations (python -m qkwh.generate); do not edit below -->"
DOCS_END = "<!-- end of the generated part -->"
RUN_MARKER = (
    "# -- one section per analysis, generated from its declaration (python -m qkwh.generate); "
    "do not edit below --"
)
_HEADER = "Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit."


def staging_name(table: Table) -> str:
    return f"stg_{table.name}"


def staging_sql(analysis: Analysis, table: Table) -> str:
    """The dbt staging model of ``table``: typed columns, non-finite doubles as NULL, a head label,
    the rows of the analysis's current parameter set (and, for an analysis that ``uses`` others,
    only rows computed with those analyses' current parameters: ``uses_are_current``)."""
    lines = [
        f"-- {table.description or table.name} Non-finite doubles become NULL.",
        f"-- {_HEADER}",
        "select",
        "    model_id,",
        "    layer,",
        "    q_head,",
        "    k_head,",
        "    {{ head_label('layer', 'q_head') }} as head_label,",
    ]
    for c in table.columns:
        if c.is_float:
            lines.append(f"    {{{{ finite('{c.name}') }}}} as {c.name},")
        elif c.null_as is not None:
            lines.append(f"    coalesce({c.name}, {c.null_as}) as {c.name},")
        else:
            lines.append(f"    {c.name},")
    lines += [
        "    config_id",
        f"from {{{{ source('qkwh', '{table.name}') }}}} as t",
        f"where {{{{ is_current_config('t', '{analysis.name}') }}}}",
    ]
    if analysis.uses:
        uses = ", ".join(f"'{u}'" for u in analysis.uses)
        lines.append(f"  and {{{{ uses_are_current('t', '{analysis.name}', [{uses}]) }}}}")
    return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def staging_yml(analysis: Analysis, table: Table) -> str:
    """The dbt properties of the staging model of ``table``: its description, every column with
    its description and unit, and one ``table_checks`` test (one dbt node) of its key (one
    parameter set per model, so the key without config_id), the model_id relationship and the
    columns' declared checks (``range``, ``not_null``)."""
    doc = f" (docs/{analysis.doc})" if analysis.doc else ""
    grain = table.grain or "one row per head"
    key = ", ".join((*HEAD_KEY[:3], *table.key))
    lines = [
        f"# {_HEADER}",
        "version: 2",
        "",
        "models:",
        f"  - name: {staging_name(table)}",
        "    description: "
        + _yaml_text(
            f"{table.description} Grain: {grain}{doc}. Only rows of the parameter set the model "
            f"currently reports for the analysis {analysis.name} (current_config)."
        ),
        "    data_tests:",
        *_table_checks(table, key),
        "    columns:",
        "      - name: model_id",
        "        description: Model id; references stg_models.",
        "      - name: layer",
        "        description: 0-based decoder layer.",
        "      - name: q_head",
        "        description: Query head index within the layer.",
        "      - name: k_head",
        "        description: Key/value head paired by the GQA rule k_head = q_head // gqa_ratio.",
        "      - name: head_label",
        "        description: Display label of the head, e.g. L5H3 (layer 5, query head 3).",
    ]
    for c in table.columns:
        unit = f" [{c.unit}]" if c.unit and c.unit != "1" else ""
        lines += [
            f"      - name: {c.name}",
            f"        description: {_yaml_text(c.description + unit)}",
        ]
    lines += [
        "      - name: config_id",
        "        description: The parameter set of the row (run_config.config_id).",
    ]
    return "\n".join(lines) + "\n"


def _table_checks(table: Table, key: str) -> list[str]:
    """The ``table_checks`` test of a staging model (its lines in the model's ``data_tests``):
    the key, model_id's reference to stg_models, and the declared not-null columns and ranges."""
    lines = [
        "      - table_checks:",
        "          arguments:",
        f"            primary_key: [{key}]",
    ]
    not_null = [c.name for c in table.columns if c.not_null]
    if not_null:
        lines.append(f"            not_null: [{', '.join(not_null)}]")
    lines += [
        "            relationships:",
        """              model_id: {to: "ref('stg_models')", field: model_id}""",
    ]
    ranged = [c for c in table.columns if c.range is not None]
    if ranged:
        lines.append("            in_range:")
        lines += [
            f"              {c.name}: [{_num(c.range[0])}, {_num(c.range[1])}]"
            for c in ranged
            if c.range is not None
        ]
    return lines


def staging_models() -> dict[str, str]:
    """file name -> text of every generated staging model and its properties file."""
    out: dict[str, str] = {}
    for a in registry.analyses():
        for t in a.tables:
            if t.staged:
                out[f"{staging_name(t)}.sql"] = staging_sql(a, t)
                out[f"{staging_name(t)}.yml"] = staging_yml(a, t)
    return out


def _yaml_text(text: str) -> str:
    """A one-line YAML scalar, quoted."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sources_part() -> str:
    """The analysis tables of the dbt source ``qkwh`` (indented for its ``tables:`` list)."""
    out: list[str] = []
    for a in registry.analyses():
        for t in a.tables:
            doc = f" (docs/{a.doc})" if a.doc else ""
            grain = t.grain or "one row per head"
            out += [
                f"      - name: {t.name}",
                f"        description: {_yaml_text(f'{t.description} Grain: {grain}{doc}.')}",
                "        data_tests:",
                "          - table_checks:",
                "              arguments:",
                f"                unique_combination: [{', '.join(t.full_key)}]",
                "        columns:",
            ]
            for c in t.columns:
                unit = f" [{c.unit}]" if c.unit and c.unit != "1" else ""
                out += [
                    f"          - name: {c.name}",
                    f"            description: {_yaml_text(c.description + unit)}",
                ]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def docs_part() -> str:
    """The per-analysis sections of docs/tables.md: every table's grain, key and columns."""
    out: list[str] = []
    for a in registry.analyses():
        page = f" Definitions: [{a.doc}]({a.doc})." if a.doc else ""
        out += [
            f"### Analysis `{a.name}`",
            "",
            f"{a.title or a.name}.{page} Parameters: run-config "
            f"section `{a.name}`; SQL function `{a.udf_name}(head)`.",
            "",
        ]
        for t in a.tables:
            out += _table_md(t, ", ".join(f"`{k}`" for k in t.full_key), "####")
    return "\n".join(out)


def _table_md(t: Table, key: str, level: str) -> list[str]:
    """One table's section: heading (``level``, e.g. "####"), description, grain, key, columns."""
    out = [
        f"{level} `{t.name}`",
        "",
        f"{t.description} Grain: {t.grain or 'one row per head'}; key: {key}.",
        "",
        "| column | type | unit | meaning |",
        "|---|---|---|---|",
    ]
    for c in t.columns:
        flag = " (in `head_metrics`)" if c.head_metric else ""
        unit = "–" if not c.unit else _md(c.unit)
        out.append(f"| `{c.name}` | {_md(c.type)} | {unit} | {_md(c.description)}{flag} |")
    out.append("")
    return out


def ablation_docs_part() -> str:
    """The ablation part of docs/tables.md: each table of ``qkwh ablate``, from its declaration."""
    from qkwh.ablate.tables import TABLES as ABLATION_TABLES

    out: list[str] = []
    for t in ABLATION_TABLES:
        out += _table_md(t, ", ".join(f"`{k}`" for k in t.key), "###")
    return "\n".join(out)


def _yaml_scalar(value: object) -> str:
    import yaml

    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def run_config_part() -> str:
    """The analysis sections of configs/run.yaml: every parameter with its default."""
    out: list[str] = []
    for a in registry.analyses():
        doc = (a.params.__doc__ or "").strip().splitlines()
        out += ["", f"{a.name}:".ljust(29) + (f"# {doc[0]}" if doc else "").rstrip()]
        for f in dataclasses.fields(a.params):
            line = f"  {f.name}: {_yaml_scalar(getattr(a.default_params(), f.name))}"
            note = f.metadata.get("doc")
            out.append(f"{line.ljust(28)} # {note}" if note else line)
    return "\n".join(out) + "\n"


def metric_entry(analysis: Analysis, metric: ModelMetric) -> dict[str, object]:
    """The catalogue entry of one declared model-level metric (keys as the dbt macros read them)."""
    entry: dict[str, object] = {
        "metric": metric.name,
        "expr": "" if metric.agg == "derived" else metric.expression,
        "agg": metric.agg,
        "grp": metric.group or analysis.name,
        "source": "" if metric.agg == "derived" else analysis.metric_source(metric),
        "where": metric.where,
        "rule": metric.rule,
        "unit": metric.unit,
        "compared": metric.compared,
        "documents": metric.documents,
        "per_taxonomy_class": metric.per_taxonomy_class,
        "analysis": analysis.name,
    }
    entry.update(dict(metric.facets))
    return entry


def metrics_macro() -> str:
    """dbt_project/macros/declared_metrics.sql: the declared model-level metrics as Jinja data."""
    entries = [metric_entry(a, m) for a, m in registry.model_metrics()]
    compared = [m.name for _, m in registry.model_metrics() if m.compared]
    lines = [
        "{#",
        f"  {_HEADER}",
        "  The model-level metrics the analyses declare (ModelMetric), one dict each: metric, expr",
        "  (head-level SQL over source), agg (mean | median | max | derived), grp (metric group),",
        "  source (the dbt relation with one row per head), where (its rows), rule (of a derived",
        "  metric), unit, compared, documents, per_taxonomy_class, analysis and facets.",
        "  Read through model_metric_catalogue() (macros/model_metrics.sql).",
        "#}",
        "{% macro declared_metrics() -%}",
        "    {%- do return([",
    ]
    lines += [f"        {json.dumps(e)}," for e in entries]
    lines += [
        "    ]) -%}",
        "{%- endmacro %}",
        "",
        "{# The metrics compared between models and datasets (dbt var comparison_metrics overrides). #}",
        "{% macro declared_comparison_metrics() -%}",
        f"    {{%- do return({json.dumps(compared)}) -%}}",
        "{%- endmacro %}",
    ]
    return "\n".join(lines) + "\n"


def mart_names() -> tuple[str, ...]:
    """Every dbt mart (a model under models/marts), sorted."""
    return tuple(sorted({p.stem for p in MARTS_DIR.iterdir() if p.suffix in (".sql", ".py")}))


def mart_names_module() -> str:
    """qkwh/mart_names.py: the marts as a Python constant (the relations reports may read)."""
    lines = [
        '"""The dbt marts: the relations a report or another reader of built results may read.',
        "",
        f"{_HEADER}",
        '"""',
        "",
        "MARTS: frozenset[str] = frozenset(",
        "    {",
    ]
    lines += [f'        "{m}",' for m in mart_names()]
    lines += ["    }", ")", ""]
    return "\n".join(lines)


def _replace_after(text: str, marker: str, part: str, end: str | None = None) -> str:
    head, found, rest = text.partition(marker + "\n")
    if not found:
        raise ValueError(f"marker line not found: {marker}")
    tail = ""
    if end is not None:
        _, found_end, after = rest.partition(end)
        if not found_end:
            raise ValueError(f"end marker not found: {end}")
        tail = end + after
    return head + marker + "\n" + part + tail


def dbt_files(project: Path = DBT_PROJECT_DIR) -> dict[Path, str]:
    """path -> text of the generated files of the dbt project at ``project`` (the staging models
    and their properties, the analysis part of ``_sources.yml``, the metric catalogue)."""
    staging = project / STAGING_DIR.relative_to(DBT_PROJECT_DIR)
    sources = project / SOURCES_YML.relative_to(DBT_PROJECT_DIR)
    files = {staging / name: text for name, text in staging_models().items()}
    files[sources] = _replace_after(sources.read_text(), SOURCES_MARKER, sources_part())
    files[project / METRICS_MACRO.relative_to(DBT_PROJECT_DIR)] = metrics_macro()
    return files


def write_dbt_project(project: Path) -> list[Path]:
    """Write the generated dbt files of the registered analyses into the dbt project at
    ``project`` (e.g. a copy of ``dbt_project/`` for an analysis registered at run time);
    returns the files that changed.  Generated staging files of tables no analysis declares any
    more are removed."""
    files = dbt_files(project)
    changed = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    staging = project / STAGING_DIR.relative_to(DBT_PROJECT_DIR)
    for p in sorted(staging.glob("stg_*.*")):
        if p not in files and _HEADER in p.read_text():
            p.unlink()
            changed.append(p)
    for p in changed:
        if p in files:
            p.write_text(files[p])
    return changed


def expected_files() -> dict[Path, str]:
    """path -> the text the generator writes there."""
    files = dbt_files()
    tables_md = _replace_after(TABLES_MD.read_text(), DOCS_MARKER, "\n" + docs_part(), DOCS_END)
    files[TABLES_MD] = _replace_after(
        tables_md, ABLATION_DOCS_MARKER, "\n" + ablation_docs_part(), DOCS_END
    )
    files[MART_NAMES_PY] = mart_names_module()
    files[RUN_CONFIG_YAML] = _replace_after(
        RUN_CONFIG_YAML.read_text(), RUN_MARKER, run_config_part()
    )
    return files


def stale_files() -> list[str]:
    """Generated files that are missing or differ from what the declarations give, plus generated
    staging models of tables no analysis declares any more (repository-relative)."""
    expected = expected_files()
    bad = [p for p, text in expected.items() if not p.exists() or p.read_text() != text]
    for p in sorted(STAGING_DIR.glob("stg_*.*")):
        if p not in expected and _HEADER in p.read_text():
            bad.append(p)
    return [str(p.relative_to(DBT_PROJECT_DIR.parent)) for p in bad]


def write() -> list[str]:
    """Write every generated file; returns those that changed."""
    changed = stale_files()
    expected = expected_files()
    for p in sorted(STAGING_DIR.glob("stg_*.*")):
        if p not in expected and _HEADER in p.read_text():
            p.unlink()
    for p, text in expected.items():
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m qkwh.generate", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--check", action="store_true", help="only report files that differ (exit 1 if any)"
    )
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_files()
        for f in stale:
            print(f"out of date: {f} (run `python -m qkwh.generate`)")
        return 1 if stale else 0
    for f in write():
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
