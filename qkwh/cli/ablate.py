"""Interventions: ``qkwh ablate`` (the work is in :mod:`qkwh.ablate`)."""

from __future__ import annotations

from typing import Annotated

import typer

from qkwh.cli.common import WarehouseOpt, friendly
from qkwh.cli.output import err, lazy_progress, out


def _ints(text: str, what: str) -> tuple[int, ...]:
    from qkwh.errors import InputError

    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a comma-separated list of integers") from None


def _floats(text: str, what: str) -> tuple[float, ...]:
    from qkwh.errors import InputError

    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a comma-separated list of numbers") from None


@friendly
def ablate(
    model: Annotated[
        str,
        typer.Argument(
            help="The model to ablate, as for `qkwh capture`: a Hugging Face model folder, a Hub id OWNER/NAME (from the local cache when there), or a .gguf file."
        ),
    ],
    model_id: Annotated[
        str,
        typer.Option(
            "--model-id", help="The ingested model whose heads are ranked (it must match MODEL)."
        ),
    ],
    rank_by: Annotated[
        str,
        typer.Option(
            "--rank-by",
            help="A numeric column of head_metrics (e.g. ap_overall) to rank the model's computed heads by.",
        ),
    ],
    order: Annotated[
        str, typer.Option("--order", help="Ablate the heads with the lowest or highest values.")
    ] = "lowest",
    k: Annotated[
        str, typer.Option("--k", help="Numbers of heads to ablate, comma-separated.")
    ] = "1,2,4,8,16",
    random_seeds: Annotated[
        int,
        typer.Option(
            "--random-seeds",
            help="Random control selections (seeds 0..N-1), each k heads drawn from the same computed heads.",
        ),
    ] = 3,
    lengths: Annotated[
        str, typer.Option("--lengths", help="Prompt lengths in tokens (answer included).")
    ] = "512,1024,2048",
    depths: Annotated[
        str,
        typer.Option("--depths", help="Where the key sits in the filler: fractions, 0 = start."),
    ] = "0.1,0.5,0.9",
    trials: Annotated[int, typer.Option("--trials", help="Prompts per length and depth.")] = 20,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="mean: replace a head's output by its mean over the unablated prompts; zero: by 0.",
        ),
    ] = "mean",
    task: Annotated[str, typer.Option("--task", help="The retrieval task (passkey).")] = "passkey",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the prompts (keys, filler).")] = 0,
    dtype: Annotated[
        str, typer.Option("--dtype", help="float32 or bfloat16 weights and activations.")
    ] = "float32",
    warehouse: WarehouseOpt = None,
) -> None:
    """Ablate the heads a warehouse metric flags and measure passkey retrieval against random heads.

    Needs the optional extra: pip install 'qkwh\\[capture]'.  The k heads with the lowest (or
    highest) --rank-by value among the model's computed heads are knocked out at the input of
    the attention output projection, and so are k heads drawn at random (--random-seeds) and
    none; each prompt's key log-probability and greedy exact match go to ablation_trials.
    Written in batches, one transaction each: the same command resumes a killed run, and adds
    nothing to a complete one.  `qkwh build` then computes the mart ablation_effects.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from qkwh.ablate.run import AblationSettings
    from qkwh.ablate.run import ablate as run

    settings = AblationSettings(
        model=model,
        model_id=model_id,
        rank_by=rank_by,
        order=order,
        ks=_ints(k, "--k"),
        random_seeds=random_seeds,
        lengths=_ints(lengths, "--lengths"),
        depths=_floats(depths, "--depths"),
        trials=trials,
        method=method,
        task=task,
        seed=seed,
        dtype=dtype,
    )
    with lazy_progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err,
    ) as progress:
        state: dict = {}

        def on_start(total: int, done: int) -> None:
            state["task"] = progress.add_task(
                "ablation trials", total=total, completed=done, rate=""
            )
            state["start"] = done

        def on_trial() -> None:
            t = state["task"]
            progress.advance(t)
            task_ = progress.tasks[t]
            if task_.elapsed:
                rate = (task_.completed - state["start"]) / task_.elapsed
                progress.update(t, rate=f"{rate:.2f} trials/s")

        report = run(
            settings,
            warehouse=warehouse,
            on_start=on_start,
            on_trial=on_trial,
            on_message=lambda m: err.print(m, style="dim", highlight=False, soft_wrap=True),
        )
    out.print(report.summary(), highlight=False)
