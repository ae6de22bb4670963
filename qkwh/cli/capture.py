"""Data makers: synth (synthetic datasets) and capture (from a local model)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from qkwh.cli.common import Command, WarehouseOpt, friendly
from qkwh.cli.output import err, out, print_ingest


def _knobs_from_source() -> tuple[dict[str, str], dict[str, float]] | None:
    """(:data:`qkwh.synth.SYNTH_KNOBS`, :func:`qkwh.synth.knob_defaults`) read from the source of
    qkwh.synth and of its generator module without importing them (they import numpy and
    pyarrow, which ``qkwh synth --help`` does without); None when a value there is not a
    literal."""
    import ast
    from importlib.util import find_spec

    def tree(module: str) -> ast.Module:
        spec = find_spec(module)
        assert spec is not None and spec.origin is not None
        return ast.parse(Path(spec.origin).read_text())

    try:
        synth, geometry = tree("qkwh.synth"), tree("qkwh.synth_geometry")
        knobs = next(
            ast.literal_eval(node.value)
            for node in synth.body
            if isinstance(node, ast.AnnAssign)
            and ast.unparse(node.target) == "SYNTH_KNOBS"
            and node.value is not None
        )
        # knob_defaults(): write_dataset's keyword defaults, then make_head's over them
        defaults: dict[str, float] = {}
        for module, name in ((synth, "write_dataset"), (geometry, "make_head")):
            fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name)
            for arg, value in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
                if arg.arg in knobs and value is not None:
                    defaults[arg.arg] = ast.literal_eval(value)
        return knobs, {k: defaults[k] for k in knobs}
    except (AssertionError, OSError, SyntaxError, StopIteration, ValueError, KeyError, TypeError):
        return None


def knobs_help() -> str:
    """The knobs of the planted geometry with their defaults, one bullet each (docs/synth.md)."""
    found = _knobs_from_source()
    if found is None:  # pragma: no cover - a knob default that is not a literal
        from qkwh.synth import SYNTH_KNOBS, knob_defaults

        found = SYNTH_KNOBS, knob_defaults()
    descriptions, defaults = found
    knobs = "\n".join(f"* {k} = {v:g}: {descriptions[k]}" for k, v in defaults.items())
    return (
        "Knobs of the planted geometry (--set NAME=VALUE; the default after =; docs/synth.md):"
        f"\n\n{knobs}"
    )


class SynthCommand(Command):
    """``synth``: its help ends with the knobs, read when the help is shown from the source of
    qkwh.synth (importing it costs numpy and pyarrow, which no ``--help`` needs)."""

    @property
    def help(self) -> str:
        return f"{self._help}\n\n{knobs_help()}" if self._help else knobs_help()

    @help.setter
    def help(self, value: str | None) -> None:
        self._help = value


@friendly
def synth(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write (sniffer layout).")],
    # synth.DEFAULT_LAYERS (not imported here: --help stays free of numpy)
    layers: Annotated[int, typer.Option(help="Layers (the layer bootstrap needs at least 5).")] = 6,
    q_heads: Annotated[int, typer.Option(help="Query heads per layer.")] = 8,
    kv_heads: Annotated[int, typer.Option(help="Key/value heads per layer (GQA).")] = 2,
    head_dim: Annotated[int, typer.Option(help="Head dimension d.")] = 64,
    rows: Annotated[int, typer.Option(help="Rows per q and k file.")] = 2000,
    examples: Annotated[int, typer.Option(help="Source examples (documents).")] = 16,
    context_length: Annotated[int, typer.Option(help="Context length in tokens.")] = 8192,
    bucket_size: Annotated[int, typer.Option(help="Uniform bucket size in tokens.")] = 512,
    seed: Annotated[int, typer.Option(help="Seed: the same seed writes the same bytes.")] = 0,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Set a knob of the planted geometry, e.g. --set alpha_k=2e-3 (repeatable; the knobs are listed above).",
        ),
    ] = None,
    warehouse: Annotated[
        Path | None,
        typer.Option(
            "--warehouse",
            "-w",
            help="Also ingest the dataset into this warehouse, as the model named after OUT_DIR's folder (without it nothing but OUT_DIR is written).",
        ),
    ] = None,
) -> None:
    """Write a synthetic sniffed dataset with planted geometry.

    Planted: drift slopes, class means, Q/K separation, RoPE-like planes, Gaussian noise, GQA,
    uniform buckets.  Register it with `qkwh ingest OUT --model-id ID` (or pass --warehouse).
    """
    from qkwh.errors import InputError, did_you_mean
    from qkwh.synth import SYNTH_KNOBS, write_dataset

    planted: dict[str, Any] = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set {item!r}: expected key=value")
        if key.strip() not in SYNTH_KNOBS:
            raise InputError(
                f"--set: unknown knob {key.strip()!r}{did_you_mean(key.strip(), SYNTH_KNOBS)}; "
                f"the knobs are {', '.join(SYNTH_KNOBS)} (`qkwh synth --help`)"
            )
        try:
            planted[key.strip()] = float(value)
        except ValueError:
            raise InputError(f"--set {item!r}: {value!r} is not a number") from None
    try:
        root = write_dataset(
            out_dir,
            n_layers=layers,
            n_q_heads=q_heads,
            n_kv_heads=kv_heads,
            d=head_dim,
            rows_per_file=rows,
            n_examples=examples,
            context_length=context_length,
            bucket_size=bucket_size,
            seed=seed,
            **planted,
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"synth: {exc}") from None
    out.print(f"wrote {root}")
    if warehouse is not None:
        from qkwh.ingest import ingest as run_ingest

        rep = run_ingest(
            str(root),
            warehouse=warehouse,
            model_id=Path(root).resolve().name,
            on_progress=lambda m: err.print(m, style="dim"),
        )
        print_ingest(rep)


# ---------------------------------------------------------------------------------------------
# capture (optional extra)
# ---------------------------------------------------------------------------------------------


@friendly
def capture(
    model: Annotated[
        str,
        typer.Argument(
            help="A Hugging Face model folder, a Hub id OWNER/NAME (taken from the local cache when it is there), or a .gguf file."
        ),
    ],
    texts: Annotated[
        list[str],
        typer.Option(
            "--texts",
            "-t",
            help="Documents, one per example: text files or folders of them, one JSONL or parquet file, or hf://datasets/OWNER/NAME\\[@REVISION] (repeatable).",
        ),
    ],
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Folder to write (sniffer layout); re-running the same command resumes an interrupted capture.",
        ),
    ],
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            help="Tokens per document after truncation (default: the model's max_position_embeddings).",
        ),
    ] = None,
    bucket_size: Annotated[
        int | None,
        typer.Option(
            "--bucket-size",
            help="Bucket size in tokens (default: max length / 16); must divide --max-length for uniform/all.",
        ),
    ] = None,
    sampler: Annotated[
        str, typer.Option("--sampler", help="uniform, log_uniform or all.")
    ] = "uniform",
    base_rate: Annotated[
        float,
        typer.Option(
            "--base-rate",
            help="Expected kept positions per bucket per document (uniform/log_uniform).",
        ),
    ] = 1.0,
    keep_first: Annotated[
        int,
        typer.Option(
            "--keep-first",
            help="Keep the first S positions of every document in both kinds (probability 1), "
            "so the attention sink can be estimated from the vectors.",
        ),
    ] = 4,
    heads: Annotated[
        int, typer.Option("--heads", help="Query heads to sample (all if the model has fewer).")
    ] = 300,
    head_seed: Annotated[int, typer.Option("--head-seed", help="Seed of the head sample.")] = 0,
    examples: Annotated[
        int | None,
        typer.Option("--examples", "-n", help="At most this many documents (default: all)."),
    ] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="float32 or bfloat16 weights and activations.")
    ] = "float32",
    include_sliding: Annotated[
        bool,
        typer.Option(
            "--include-sliding",
            help="Also sample heads of sliding-window layers (their files record the window); default: full-attention layers only.",
        ),
    ] = False,
    split: Annotated[
        str, typer.Option("--split", help="Split of a hf://datasets/ source.")
    ] = "train",
    subset: Annotated[
        str | None,
        typer.Option("--subset", help="Configuration (subset) of a hf://datasets/ source."),
    ] = None,
    text_column: Annotated[
        str, typer.Option("--text-column", help="Text field of a JSONL, parquet or Hub source.")
    ] = "text",
    id_column: Annotated[
        str | None,
        typer.Option(
            "--id-column",
            help="Id field of a JSONL, parquet or Hub source (default: 'id' if present, else the row number).",
        ),
    ] = None,
    ingest_: Annotated[
        bool,
        typer.Option("--ingest", help="Register the capture in the warehouse when it is done."),
    ] = False,
    model_id: Annotated[
        str | None,
        typer.Option(
            "--model-id", help="With --ingest: the model id (default: the --out folder's name)."
        ),
    ] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Capture post-RoPE Q/K vectors of a local model into the sniffer layout.

    Needs the optional extra: pip install 'qkwh\\[capture]'.  One document per example, batch 1,
    truncated to --max-length; the sampled positions, heads and files follow the public capture
    protocol, so the result is comparable with published captures.  Then `qkwh ingest OUT`
    (or pass --ingest).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from qkwh.capture.run import CaptureSettings
    from qkwh.capture.run import capture as run
    from qkwh.cli.output import lazy_progress, print_ingest
    from qkwh.errors import InputError

    if model_id is not None and not ingest_:
        raise InputError("--model-id only applies with --ingest")
    settings = CaptureSettings(
        model=model,
        texts=tuple(texts),
        max_length=max_length,
        bucket_size=bucket_size,
        sampler=sampler,
        base_rate=base_rate,
        keep_first=keep_first,
        heads=heads,
        head_seed=head_seed,
        examples=examples,
        dtype=dtype,
        include_sliding=include_sliding,
        split=split,
        text_column=text_column,
        id_column=id_column,
        subset=subset,
    )
    with lazy_progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        state: dict = {"tokens": 0}

        def on_start(total: int, done: int) -> None:
            state["task"] = progress.add_task("capturing examples", total=total, rate="")

        def on_example(tokens: int) -> None:
            t = state["task"]
            state["tokens"] += tokens
            progress.advance(t)
            elapsed = progress.tasks[t].elapsed
            if elapsed:
                progress.update(t, rate=f"{state['tokens'] / elapsed:,.0f} tokens/s")

        report = run(
            settings,
            out_dir,
            on_start=on_start,
            on_example=on_example,
            on_message=lambda m: err.print(m, style="dim", highlight=False),
        )
    out.print(report.summary(), highlight=False)
    if ingest_:
        from qkwh.ingest import ingest as run_ingest

        rep = run_ingest(
            str(report.out),
            warehouse=warehouse,
            model_id=model_id or report.out.resolve().name,
            on_progress=lambda m: err.print(m, style="dim"),
        )
        print_ingest(rep)
