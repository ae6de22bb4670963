"""Capture post-RoPE Q/K vectors of a local model into the sniffer layout (optional extra).

``pip install 'qkwh[capture]'`` brings torch, transformers, gguf, accelerate and datasets; nothing
here imports them until a capture runs, so ``import qkwh`` stays torch-free.

* :mod:`qkwh.capture.sampling` — example ids, buckets, position masks, head sampling
* :mod:`qkwh.capture.sources` — text files, JSONL, parquet or Hub datasets, one document per example
* :mod:`qkwh.capture.model` — loading a model (folder, Hub id, GGUF) and hooking its attention
* :mod:`qkwh.capture.parts` — resumable per-example part files and the final files
* :mod:`qkwh.capture.run` — :func:`~qkwh.capture.run.capture`, which ties them together
"""
