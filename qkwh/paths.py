"""Where qkwh finds its own files.

qkwh runs from a clone of its repository (``make demo`` / ``make test`` install it editable), so
the schema, the model registry, the dbt project and the embedded sample are located relative to
the repository root.  ``QKWH_HOME`` overrides that root (for an installed copy elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(os.environ.get("QKWH_HOME", Path(__file__).resolve().parents[1]))
WAREHOUSE_DIR = REPO_ROOT / "warehouse"
SCHEMA_SQL = WAREHOUSE_DIR / "schema.sql"
SQL_DIR = Path(__file__).resolve().parent / "sql"
CONFIG_DIR = REPO_ROOT / "configs"
REGISTRY_CSV = CONFIG_DIR / "models.csv"
RUN_CONFIG_YAML = CONFIG_DIR / "run.yaml"
DBT_PROJECT_DIR = REPO_ROOT / "dbt_project"
SAMPLE_DIR = WAREHOUSE_DIR / "sample" / "smollm2-135m"
DEFAULT_WAREHOUSE = WAREHOUSE_DIR / "qkwh.duckdb"
REPORTS_DIR = REPO_ROOT / "reports"
