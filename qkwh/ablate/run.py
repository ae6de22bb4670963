"""``qkwh ablate``: rank heads by a warehouse metric, ablate the top k (and k random heads), and
measure passkey retrieval; every trial is stored beside the geometry.

Flow: everything that can be checked without the model is checked on a read-only connection
(the model id, the metric, k); the model is loaded as ``qkwh capture`` loads it and refused when
its architecture, layer count or head counts differ from the ingested model's; then the run's
row and prompts are written, and the trials follow in batches (one (selection, k, length) group
each, one transaction each, the warehouse open only while a batch is written).  The run id is a
hash of everything that defines the run, so the same command resumes a killed run where it
stopped and a complete run is left alone ("nothing to add").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qkwh import store
from qkwh.ablate import passkey
from qkwh.ablate.hooks import METHODS, MeanRecorder, ablated
from qkwh.ablate.selection import Head, HeadScores, head_scores, selections
from qkwh.ablate.tables import ABLATION_PROMPTS, ABLATION_RUNS, ABLATION_TRIALS
from qkwh.errors import InputError, MissingExtraError, NotFoundError

TASKS = (passkey.TASK,)


@dataclass(frozen=True)
class AblationSettings:
    """Everything that defines a run (its id is a hash of these, the model's revision, the
    metric's parameter sets and the code version)."""

    model: str
    model_id: str
    rank_by: str
    order: str = "lowest"
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    random_seeds: int = 3
    lengths: tuple[int, ...] = (512, 1024, 2048)
    depths: tuple[float, ...] = (0.1, 0.5, 0.9)
    trials: int = 20
    method: str = "mean"
    task: str = passkey.TASK
    seed: int = 0
    dtype: str = "float32"

    def check(self) -> None:
        if self.order not in ("lowest", "highest"):
            raise InputError(f"--order must be lowest or highest, not {self.order!r}")
        if self.method not in METHODS:
            raise InputError(f"--method must be zero or mean, not {self.method!r}")
        if self.task not in TASKS:
            raise InputError(f"--task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if not self.ks or any(k < 1 for k in self.ks) or len(set(self.ks)) != len(self.ks):
            raise InputError("--k: give distinct numbers of heads, each at least 1")
        if self.random_seeds < 0:
            raise InputError("--random-seeds must be 0 or more")
        if not self.lengths or any(n < 1 for n in self.lengths):
            raise InputError("--lengths: give positive numbers of tokens")
        if not self.depths or any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise InputError("--depths: give fractions between 0 and 1")
        if self.trials < 1:
            raise InputError("--trials must be at least 1")

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.random_seeds))


@dataclass
class AblationReport:
    run_id: str
    model_id: str
    metric: str
    trials_total: int
    trials_added: int
    trials_before: int
    seconds: float
    refused: str | None = None
    selections: list[tuple[str, int]] = field(default_factory=list)

    def summary(self) -> str:
        if self.trials_added == 0 and self.trials_before == self.trials_total:
            return (
                f"ablation run {self.run_id} of {self.model_id} by {self.metric} is complete "
                f"({self.trials_total} trials): nothing to add"
            )
        resumed = f", {self.trials_before} were already there" if self.trials_before else ""
        return (
            f"ablation run {self.run_id} of {self.model_id} by {self.metric}: "
            f"{self.trials_added} trials added in {self.seconds:.0f} s{resumed} "
            f"({self.trials_total} in the run); `qkwh build` then `qkwh report` show the effects"
        )


def require_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"qkwh ablate needs the optional extra ({exc.name} is not installed)", "capture"
        ) from None


def code_version() -> str:
    """qkwh's version plus a hash of the ablation code and the filler text."""
    import qkwh

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted([*here.glob("*.py"), passkey.FILLER]):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return f"{qkwh.__version__}+{h.hexdigest()[:10]}"


def model_revision(source: str, kind: str, lm: Any) -> str:
    """The Hub commit of a Hub model, the sha256 of a GGUF file, else of the folder's config."""
    commit = getattr(lm.config, "_commit_hash", None)
    if kind == "hub" and commit:
        return str(commit)
    p = Path(source).expanduser()
    h = hashlib.sha256()
    target = p if p.is_file() else p / "config.json"
    if target.is_file():
        with open(target, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return f"sha256:{h.hexdigest()[:16]}"
    return str(commit or "")


def _ingested(con: Any, model_id: str) -> dict[str, Any]:
    row = con.execute(
        "SELECT num_layers, num_q_heads, num_kv_heads, metadata_json FROM models WHERE model_id = ?",
        [model_id],
    ).fetchone()
    if row is None:
        known = [r[0] for r in con.execute("SELECT model_id FROM models ORDER BY 1").fetchall()]
        from qkwh.errors import unknown_names

        raise NotFoundError(unknown_names("model", [model_id], known, " in the warehouse"))
    meta = json.loads(row[3]) if row[3] else {}
    return {
        "model_type": meta.get("model_type"),
        "num_layers": row[0],
        "num_q_heads": row[1],
        "num_kv_heads": row[2],
    }


def check_model_matches(info: Any, ingested: dict[str, Any], model_id: str) -> None:
    """InputError (one line naming both) when the loaded model's architecture, layer count or
    head counts differ from the ingested model's (a field the warehouse lacks is not compared)."""
    have = {
        "model_type": info.model_type,
        "num_layers": info.num_layers,
        "num_q_heads": info.num_query_heads,
        "num_kv_heads": info.num_key_heads,
    }
    diff = [
        f"{k} {have[k]} vs {ingested[k]}"
        for k in have
        if ingested.get(k) is not None and str(have[k]) != str(ingested[k])
    ]
    if diff:
        raise InputError(
            f"{info.source} does not match the ingested model {model_id}: {'; '.join(diff)} "
            "(loaded vs ingested); nothing was written"
        )


def run_id_of(settings: AblationSettings, revision: str, scores: HeadScores, code: str) -> str:
    ident = {
        "settings": {k: v for k, v in asdict(settings).items() if k != "model"},
        "revision": revision,
        "metric_configs": scores.configs,
        "code_version": code,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _write(con: Any, table: str, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa

    if not rows:
        return
    data = pa.Table.from_pylist(rows)
    con.register("_qkwh_ablation_rows", data)
    try:
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _qkwh_ablation_rows')
    finally:
        con.unregister("_qkwh_ablation_rows")


def score_prompt(lm: Any, prompt: passkey.Prompt) -> tuple[float, bool]:
    """(log-probability of the key's tokens given everything before, teacher forced; greedy
    exact match).  Greedy decoding reproduces the key exactly iff every teacher-forced argmax
    is the key's token, so one forward gives both."""
    import torch

    ids = torch.tensor([prompt.input_ids], dtype=torch.long)
    n_ans = len(prompt.input_ids) - prompt.answer_start
    with torch.inference_mode():
        try:
            out = lm(input_ids=ids, logits_to_keep=n_ans + 1, use_cache=False)
            logits = out.logits[0, :n_ans].double()
        except TypeError:  # an architecture without logits_to_keep
            out = lm(input_ids=ids, use_cache=False)
            logits = out.logits[0, prompt.answer_start - 1 : -1].double()
    target = ids[0, prompt.answer_start :]
    logp = torch.log_softmax(logits, dim=-1)
    lp = float(logp.gather(1, target[:, None]).sum())
    correct = bool((logits.argmax(-1) == target).all())
    return lp, correct


def ablate(
    settings: AblationSettings,
    *,
    warehouse: str | Path | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_trial: Callable[[], None] | None = None,
    on_message: Callable[[str], None] | None = None,
    load_model: Callable[[str, str], tuple[Any, Any, Any]] | None = None,
) -> AblationReport:
    """Run (or resume) an ablation; see the module docstring.  ``load_model(model, dtype)``
    returns (model, tokenizer, ModelInfo) (default: :func:`qkwh.capture.model.load`)."""
    import time

    t0 = time.monotonic()
    settings.check()
    if load_model is None:
        require_extra()
    say = on_message or (lambda m: None)
    wh = store.resolve_warehouse(warehouse)
    if not wh.is_file():
        raise NotFoundError(
            f"no warehouse at {wh}: run `qkwh ingest SOURCE` first, or pass --warehouse"
        )
    # everything checkable without the model, read-only (a refusal leaves the file untouched)
    con = store.connect(wh, read_only=True)
    try:
        ingested = _ingested(con, settings.model_id)
        scores = head_scores(con, settings.model_id, settings.rank_by)
    finally:
        con.close()
    plan = selections(scores, settings.order, settings.ks, settings.seeds)

    if load_model is None:
        from qkwh.capture.model import load

        load_model = lambda m, d: load(m, dtype=d)  # noqa: E731
    say(f"loading {settings.model}")
    lm, tokenizer, info = load_model(settings.model, settings.dtype)
    check_model_matches(info, ingested, settings.model_id)
    bad = [h for h in scores.heads if h[0] >= info.num_layers or h[1] >= info.num_query_heads]
    if bad:
        raise InputError(
            f"{settings.model}: heads {bad[:3]} of {settings.model_id} do not exist in it"
        )
    prompts = passkey.prompts(
        tokenizer, settings.lengths, settings.depths, settings.trials, seed=settings.seed
    )
    code = code_version()
    revision = model_revision(settings.model, info.kind, lm)
    run_id = run_id_of(settings, revision, scores, code)

    # the run's row and its prompts (once), then what is already there
    con = store.connect(wh)
    try:
        with store.transaction(con):
            exists = con.execute(
                "SELECT 1 FROM ablation_runs WHERE run_id = ?", [run_id]
            ).fetchone()
            if not exists:
                params = asdict(settings)
                _write(
                    con,
                    ABLATION_RUNS.name,
                    [
                        {
                            "run_id": run_id,
                            "model_id": settings.model_id,
                            "model_source": settings.model,
                            "model_kind": info.kind,
                            "model_revision": revision,
                            "model_type": info.model_type,
                            "metric": settings.rank_by,
                            "rank_order": settings.order,
                            "method": settings.method,
                            "task": settings.task,
                            "ks": list(settings.ks),
                            "random_seeds": list(settings.seeds),
                            "lengths": list(settings.lengths),
                            "depths": [float(d) for d in settings.depths],
                            "trials": settings.trials,
                            "seed": settings.seed,
                            "dtype": settings.dtype,
                            "n_heads_computed": len(scores.heads),
                            "metric_configs": scores.configs_json(),
                            "params_json": json.dumps(params, sort_keys=True),
                            "code_version": code,
                            "started_at": dt.datetime.now(),
                            "finished_at": None,
                        }
                    ],
                )
                _write(
                    con,
                    ABLATION_PROMPTS.name,
                    [
                        {
                            "run_id": run_id,
                            "length": p.length,
                            "depth": p.depth,
                            "trial": p.trial,
                            "prompt": p.prompt,
                            "passkey": p.passkey,
                            "input_ids": list(p.input_ids),
                            "answer_start": p.answer_start,
                            "key_position": p.key_position,
                        }
                        for p in prompts
                    ],
                )
        done = {
            (r[0], int(r[1]), int(r[2]), float(r[3]), int(r[4]))
            for r in con.execute(
                "SELECT selection, k, length, depth, trial FROM ablation_trials WHERE run_id = ?",
                [run_id],
            ).fetchall()
        }
    finally:
        con.close()

    total = len(plan) * len(prompts)
    before = sum(
        1 for sel, k, _ in plan for p in prompts if (sel, k, p.length, p.depth, p.trial) in done
    )
    report = AblationReport(
        run_id=run_id,
        model_id=settings.model_id,
        metric=settings.rank_by,
        trials_total=total,
        trials_added=0,
        trials_before=before,
        seconds=0.0,
        selections=[(s, k) for s, k, _ in plan],
    )
    if before == total:
        _finish(wh, run_id)
        report.seconds = time.monotonic() - t0
        return report
    if on_start:
        on_start(total, before)

    means = None
    if settings.method == "mean":
        # the mean slices over the run's unablated prompts (the none pass, recomputed on resume)
        recorder = MeanRecorder(lm, info.head_dim)
        none_rows = []
        for p in prompts:
            with recorder.recording():
                lp, ok = score_prompt(lm, p)
            key = ("none", 0, p.length, p.depth, p.trial)
            if key not in done:
                none_rows.append(_trial_row(run_id, "none", 0, (), p, lp, ok))
                if on_trial:
                    on_trial()
        _commit(wh, none_rows)
        report.trials_added += len(none_rows)
        done |= {("none", 0, r["length"], r["depth"], r["trial"]) for r in none_rows}
        means = recorder.means()

    for sel, k, heads in plan:
        for length in settings.lengths:
            todo = [
                p
                for p in prompts
                if p.length == length and (sel, k, p.length, p.depth, p.trial) not in done
            ]
            if not todo:
                continue
            rows = []
            with ablated(lm, heads, head_dim=info.head_dim, means=means):
                for p in todo:
                    lp, ok = score_prompt(lm, p)
                    rows.append(_trial_row(run_id, sel, k, heads, p, lp, ok))
                    if on_trial:
                        on_trial()
            _commit(wh, rows)
            report.trials_added += len(rows)
    _finish(wh, run_id)
    report.seconds = time.monotonic() - t0
    return report


def _trial_row(
    run_id: str, sel: str, k: int, heads: tuple[Head, ...], p: passkey.Prompt, lp: float, ok: bool
) -> dict[str, Any]:
    if not math.isfinite(lp):
        lp = float("-inf")
    return {
        "run_id": run_id,
        "selection": sel,
        "k": k,
        "heads": [{"layer": int(a), "q_head": int(b)} for a, b in heads],
        "length": p.length,
        "depth": p.depth,
        "trial": p.trial,
        "logprob": lp,
        "correct": ok,
    }


def _commit(wh: Path, rows: list[dict[str, Any]]) -> None:
    """One batch of trials, in one transaction (the warehouse is open only meanwhile)."""
    if not rows:
        return
    con = store.connect(wh)
    try:
        with store.transaction(con):
            _write(con, ABLATION_TRIALS.name, rows)
    finally:
        con.close()


def _finish(wh: Path, run_id: str) -> None:
    con = store.connect(wh)
    try:
        con.execute(
            "UPDATE ablation_runs SET finished_at = ? WHERE run_id = ? AND finished_at IS NULL",
            [dt.datetime.now(), run_id],
        )
    finally:
        con.close()
