"""The declarations of the built-in analyses, one module each (parameters, tables, columns).

Pure data: each module imports only :mod:`qkwh.analyses.declaration`.  The registry
(:mod:`qkwh.analyses.registry`) registers the modules listed in its ``BUILTIN``.
"""
