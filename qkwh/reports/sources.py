"""The marts report figures may read: the one place the report reads this list from.

:class:`qkwh.reports.base.Marts` refuses every other relation, and the tests check the list
against the dbt project's marts.  The list itself is generated (qkwh/mart_names.py).
"""

from __future__ import annotations

from qkwh import mart_names

#: The relations a figure module may read: the dbt marts, as listed by ``python -m qkwh.generate``
#: from dbt_project/models/marts (qkwh/mart_names.py).  Everything else (per-head compute
#: tables, the catalog, staging and intermediate models) is off limits; the collages' raw vectors
#: and axes are read by qkwh.reports.vectors alone.
MARTS: frozenset[str] = mart_names.MARTS
