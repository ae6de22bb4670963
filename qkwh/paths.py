"""Where qkwh finds its own files, and where it writes by default.

Run-time files (the warehouse schema, the model registry, the run defaults, the dbt project, the
embedded samples and the documentation) are found beside the package's own folder:

* an installed wheel carries them as package data in ``qkwh/_data/`` (the build copies the
  repository's ``warehouse/``, ``configs/``, ``dbt_project/`` and ``docs/`` there, see
  ``setup.py``);
* a clone (``make install`` is an editable install) has no ``qkwh/_data/``, and the same files
  are read where the repository keeps them, one level above the package.

Both layouts are the same below their root, so every path here is ``DATA_ROOT / <repo path>``.

qkwh never writes into these folders.  What it writes goes to the working directory unless told
otherwise: the warehouse ``./qkwh.duckdb`` (``$QKWH_WAREHOUSE`` or ``--warehouse`` choose
another), reports under ``./reports/``, and dbt's ``target/`` and ``logs/`` next to the warehouse
(see :func:`qkwh.build.dbt_work_dir`).  ``qkwh demo`` has its own warehouse and report folder.
"""

from __future__ import annotations

from pathlib import Path

# the folder of the qkwh package: what importlib.resources.files("qkwh") gives for an installed
# folder (a zipped install is not supported), without importing importlib.resources, which every
# command (and `qkwh --help`) would pay for at start-up
PACKAGE_DIR = Path(__file__).parent
if not (PACKAGE_DIR / "__init__.py").is_file():  # pragma: no cover - zipped installs
    raise ImportError(f"qkwh must be installed as a folder, not inside an archive ({PACKAGE_DIR})")


def _data_root(package: Path) -> Path:
    bundled = package / "_data"
    if bundled.is_dir():  # an installed wheel
        return bundled
    repo = package.parent  # a clone with an editable install
    if (repo / "dbt_project" / "dbt_project.yml").is_file():
        return repo
    raise ImportError(
        f"qkwh's data files are missing: neither {bundled} nor a repository around {package}; "
        "reinstall qkwh (pip install qkwh, or make install in a clone)"
    )


DATA_ROOT: Path = _data_root(PACKAGE_DIR)
SQL_DIR = PACKAGE_DIR / "sql"
SCHEMA_SQL = DATA_ROOT / "warehouse" / "schema.sql"
CONFIG_DIR = DATA_ROOT / "configs"
REGISTRY_CSV = CONFIG_DIR / "models.csv"
RUN_CONFIG_YAML = CONFIG_DIR / "run.yaml"
DBT_PROJECT_DIR = DATA_ROOT / "dbt_project"
SAMPLE_DIR = DATA_ROOT / "warehouse" / "sample" / "smollm2-135m"  # technical prose
# the same model captured on Python source code (a second dataset); `qkwh demo` ingests both
CODE_SAMPLE_DIR = DATA_ROOT / "warehouse" / "sample" / "smollm2-135m-code"
SAMPLE_DIRS = (SAMPLE_DIR, CODE_SAMPLE_DIR)
DOCS_DIR = DATA_ROOT / "docs"  # tables, metrics, input format (the help texts cite these pages)

# Defaults relative to the working directory (resolved when used, never inside the package).
DEFAULT_WAREHOUSE = Path("qkwh.duckdb")
REPORTS_DIR = Path("reports")
DEMO_WAREHOUSE = Path("qkwh-demo.duckdb")
DEMO_REPORT = REPORTS_DIR / "demo"
