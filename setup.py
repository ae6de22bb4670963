"""Build hook: bundle the files qkwh reads at run time into the wheel, as ``qkwh/_data/``.

git keeps one copy of them where the repository layout puts them (``warehouse/schema.sql``, the
embedded sample under ``warehouse/sample/``, ``configs/``, ``dbt_project/``, and the
documentation in ``docs/``, so an installed qkwh can point at it).  Building the
package copies them into the build folder, never into the source tree, and ``qkwh.paths`` finds
them beside the package's folder.  An editable install (``make install``) copies nothing: the
package then reads them from the repository.  Everything else is in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# repository path -> the same path under qkwh/_data in the wheel
BUNDLED = ("warehouse/schema.sql", "warehouse/sample", "configs", "dbt_project", "docs")
# what dbt and local runs leave behind in a working copy
SKIPPED = shutil.ignore_patterns(
    "target",
    "logs",
    ".user.yml",
    "__pycache__",
    "*.pyc",
    "*.duckdb",
    "*.duckdb.*",
    "dbt_packages",
    "*.dbt",
)


class BuildPyWithData(build_py):
    """``build_py`` plus the copy of :data:`BUNDLED` into ``<build_lib>/qkwh/_data``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "qkwh" / "_data"
        if dest.exists():
            shutil.rmtree(dest)  # a stale copy from an earlier build must not linger
        for rel in BUNDLED:
            src, dst = HERE / rel, dest / rel
            if not src.exists():
                raise FileNotFoundError(f"cannot build qkwh: {src} is missing")
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=SKIPPED)
            else:
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildPyWithData})
