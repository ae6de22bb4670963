"""qkwh: an analytical warehouse for sniffed post-RoPE Q/K vectors of LLM attention heads."""

__version__ = "0.1.0"
