"""Helpers of the ablation tests: tiny random models (Llama-style with GQA, and Qwen2) built from
configs (no downloads), a character-level tokenizer, and a planted warehouse (a models row and a
head_metrics table) to rank their heads by."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest


def need_capture_extra():
    pytest.importorskip("torch", reason="capture extra not installed (pip install 'qkwh[capture]')")
    pytest.importorskip(
        "transformers", reason="capture extra not installed (pip install 'qkwh[capture]')"
    )


def make_tokenizer():
    """A character-level fast tokenizer that prepends a BOS token; returns (tokenizer, vocab)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    return fast, len(vocab)


#: the tiny architectures: (layers, query heads, key/value heads, head_dim)
SHAPES = {"llama": (3, 4, 2, 16), "qwen2": (2, 6, 2, 8)}


def build_model(kind: str, seed: int = 0, layers: int | None = None):
    """(model in eval mode, tokenizer) of a tiny random ``kind`` ('llama' GQA 4:2, 'qwen2' 6:2
    with q/k/v biases); every parameter randomised (norm weights away from 1)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer, vocab = make_tokenizer()
    n_layers, n_q, n_kv, d = SHAPES[kind]
    common = dict(
        vocab_size=vocab,
        hidden_size=n_q * d,
        intermediate_size=64,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        num_hidden_layers=layers or n_layers,
        num_attention_heads=n_q,
        num_key_value_heads=n_kv,
    )
    torch.manual_seed(seed)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, head_dim=d, attn_implementation="eager"))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common, attn_implementation="eager"))
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.mul_(4.0)  # sharper attention and logits than the default init
    model.eval()
    return model, tokenizer


def save_model(kind: str, folder: Path, seed: int = 0, layers: int | None = None) -> Path:
    model, tokenizer = build_model(kind, seed, layers)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def planted_warehouse(path: Path, model_id: str, kind: str, values: dict[tuple[int, int], float]):
    """A warehouse holding one model row shaped like ``kind`` and a head_metrics table with the
    planted metric ``m`` (and ``m2`` = -m) for the given heads."""
    from qkwh import store

    n_layers, n_q, n_kv, d = SHAPES[kind]
    con = store.connect(path)
    try:
        con.execute(
            """INSERT INTO models (model_id, source, source_kind, root_path, source_fingerprint,
               num_layers, num_q_heads, num_kv_heads, head_dim, context_length,
               context_length_rule, bucket_size, in_registry, n_files, n_rows, metadata_json,
               ingested_at)
               VALUES (?, 'test', 'local', '/nowhere', 'x', ?, ?, ?, ?, 1024, 'test', 64, false,
               0, 0, ?, now())""",
            [model_id, n_layers, n_q, n_kv, d, json.dumps({"model_type": kind})],
        )
        con.execute(
            "CREATE TABLE head_metrics (model_id VARCHAR, layer INTEGER, q_head INTEGER, "
            "k_head INTEGER, taxonomy VARCHAR, m DOUBLE, m2 DOUBLE, config_id_pca VARCHAR)"
        )
        for (layer, h), v in values.items():
            con.execute(
                "INSERT INTO head_metrics VALUES (?, ?, ?, ?, 'mixed', ?, ?, 'cfg1')",
                [model_id, layer, h, h // (n_q // n_kv), v, None if v is None else -v],
            )
    finally:
        con.close()
    return path
