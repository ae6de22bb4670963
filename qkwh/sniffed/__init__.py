"""qkwh.sniffed."""
