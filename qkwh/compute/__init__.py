"""qkwh.compute."""
