"""qkwh.reports."""
