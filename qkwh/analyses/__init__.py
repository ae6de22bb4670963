"""Pure per-head analyses (docs/metrics/): numpy arrays in, typed results out.

No file I/O, no DuckDB, no CLI.  See :mod:`qkwh.analyses.types` for the shared contract.
"""
