"""`qkwh compute --executor ray` on a real local Ray cluster: a head and a worker node, 1 CPU each.

The tables equal the process pool's bit for bit; a Ray worker process killed while it runs a
task makes Ray retry the task and the run still writes every head exactly once; Ctrl-C (or any
exception in the caller) cancels what is still queued.  Skipped with the reason when Ray cannot be
imported (`make test` installs it: the `ray` extra).

The cluster and every Ray driver (each `qkwh compute --executor ray`, the cancellation case) run
in processes of their own (tests/compute/ray_processes.py): this process never connects to Ray,
so no Ray state outlives a test, and each run connects once, as a user's `qkwh compute` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'qkwh[ray]'; make test installs it)"
)

from qkwh import store
from qkwh.cli import app
from qkwh.compute.runner import compute
from qkwh.config import load_execution, load_run_config
from qkwh.ingest import ingest
from qkwh.synth import write_dataset
from tests.compute.test_compute import RESULT_TABLES, results

PROCESSES = Path(__file__).with_name("ray_processes.py")
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
N_HEADS = 8  # 2 layers x 4 query heads, 2 KV heads: 4 tasks of 2 heads


@pytest.fixture(scope="module")
def cluster():
    """The address of a head node and one worker node on this machine, 1 CPU each, kept by a
    process of their own until the module is done (closing its stdin shuts them down)."""
    if any(ch.isspace() for ch in sys.executable):
        pytest.skip(
            f"this Python's path holds a space ({sys.executable!r}): Ray cannot start workers "
            "from it (qkwh refuses such a local cluster, see the test below)"
        )
    proc = subprocess.Popen(
        [sys.executable, str(PROCESSES), "cluster"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        line = proc.stdout.readline()  # written once both nodes are up (or empty: it failed)
        assert line, f"the Ray cluster process ended (exit {proc.wait()}) before its nodes were up"
        info = json.loads(line)
        assert info["nodes"] == 2
        yield info["address"]
    finally:
        proc.stdin.close()
        proc.wait(timeout=300)


def _env(**extra: str) -> dict[str, str]:
    """This process's environment, with the repository importable (the workers of a run that
    Ray starts inherit it through the driver)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _qkwh(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "qkwh.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )


def _finished(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synth") / "syn"
    write_dataset(
        root,
        n_layers=2,
        n_q_heads=4,
        n_kv_heads=2,
        d=32,
        rows_per_file=1500,
        n_examples=8,
        context_length=4096,
        bucket_size=512,
        seed=1,
    )
    return root


def _fresh(model: Path, tmp_path: Path, name: str) -> Path:
    db = tmp_path / f"{name}.duckdb"
    ingest(str(model), warehouse=db, model_id="syn")
    return db


@pytest.fixture(scope="module")
def pool_results(model, tmp_path_factory) -> dict:
    db = _fresh(model, tmp_path_factory.mktemp("pool"), "pool")
    report = compute(db, workers=2)
    assert report.failures == [] and report.n_written == N_HEADS
    return results(db)


@pytest.mark.slow  # a 2-node Ray cluster
def test_cli_ray_executor_writes_the_pools_tables(cluster, model, pool_results, tmp_path):
    db = _fresh(model, tmp_path, "ray")
    out = _finished(_qkwh("compute", "-w", str(db), "--executor", "ray", "--ray-address", cluster))
    assert f"computed {N_HEADS} head(s)" in out
    assert results(db) == pool_results  # every row of every table, bit for bit


@pytest.mark.slow  # a 2-node Ray cluster
def test_ray_workers_stream_a_remote_branch_from_the_hub(
    cluster, model, pool_results, tmp_path, monkeypatch
):
    """A branch cataloged with --remote, computed on the cluster: workers fetch their own files
    (HF_ENDPOINT reaches them through the task's runtime env) and write the pool's tables."""
    from tests.sniffed.hub_server import HubStandIn

    served = {
        p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()
    }
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    db = tmp_path / "remote.duckdb"
    with HubStandIn("owner/corpus", {"syn": served}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        r = runner.invoke(
            app,
            [
                "ingest",
                "hf://datasets/owner/corpus@syn",
                "--remote",
                "--model-id",
                "syn",
                "-w",
                str(db),
            ],
        )
        assert r.exit_code == 0, r.output + r.stderr
        hub.clear_log()
        out = _finished(
            _qkwh(
                "compute",
                "-w",
                str(db),
                "--executor",
                "ray",
                "--ray-address",
                cluster,
                HF_ENDPOINT=hub.endpoint,
            )
        )
        fetched = {q.filename for q in hub.requests if q.method == "GET" and q.filename}
    assert f"computed {N_HEADS} head(s)" in out  # exit 0: no head failed
    assert fetched == {k for k in served if k.endswith(".parquet")}
    assert results(db) == pool_results


def test_executor_choice_is_not_an_analysis_parameter(tmp_path):
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("executor: ray\nray_address: auto\nseed: 0\n")
    assert load_execution(yaml_file) == {"executor": "ray", "ray_address": "auto"}
    cfg = load_run_config(yaml_file)
    base = load_run_config()
    assert all(
        cfg.fingerprint(a, "v") == base.fingerprint(a, "v")
        for a in ("pca", "rotation", "plasticity")
    )
    r = runner.invoke(app, ["compute", "-w", str(tmp_path / "wh.duckdb"), "--executor", "spark"])
    assert r.exit_code == 2 and "--executor must be pool or ray" in r.stderr


def _ray_task_pids() -> list[int]:
    """Ray worker processes busy with a qkwh task (Ray titles them after the running task)."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [
        int(line.split(None, 1)[0])
        for line in out.splitlines()
        if "ray::qkwh_task" in line and "IDLE" not in line
    ]


@pytest.mark.slow  # a 2-node Ray cluster
def test_worker_killed_mid_task_is_retried_without_duplicate_or_missing_rows(
    cluster, model, pool_results, tmp_path
):
    db = _fresh(model, tmp_path, "killed")
    proc = _qkwh("compute", "-w", str(db), "--executor", "ray", "--ray-address", cluster)
    killed = None
    while killed is None and proc.poll() is None:
        pids = _ray_task_pids()
        if pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)  # a polling interval: the kill waits for a task to be seen running
    out = _finished(proc)
    assert killed is not None, "no Ray worker was seen running a task"
    # the lost task was run again: every head written, none failed
    assert f"computed {N_HEADS} head(s)" in out  # exit 0: no head failed
    con = store.connect(db, read_only=True)
    try:
        dup = con.execute(
            "SELECT count(*) FROM (SELECT layer, q_head, analysis FROM head_runs "
            "GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone()[0]
        heads = {
            t: con.execute(f"SELECT count(DISTINCT (layer, q_head)) FROM {t}").fetchone()[0]
            for t in RESULT_TABLES
        }
    finally:
        con.close()
    assert dup == 0 and heads == dict.fromkeys(RESULT_TABLES, N_HEADS)
    assert results(db) == pool_results


@pytest.mark.slow  # a 2-node Ray cluster
def test_stopping_the_caller_cancels_queued_and_running_tasks(cluster, tmp_path):
    """Tasks 1.. never finish on their own (they wait for a file), so no timing decides the
    outcome: every task submitted after the first must end cancelled, none may have finished
    (the checks are in ``ray_processes.cancel``, run as a driver of its own)."""
    try:
        proc = subprocess.run(
            [sys.executable, str(PROCESSES), "cancel", cluster, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=600,  # a last resort: the driver's watchdog reports a hang first
            env=_env(),
        )
    except subprocess.TimeoutExpired as exc:
        log = exc.stderr or b""  # (bytes: what was read before the timeout)
        log = log.decode(errors="replace") if isinstance(log, bytes) else log
        pytest.fail(f"the cancel driver did not end; its log:\n{log}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.glob("end-*")) == ["end-0"]


def test_a_local_cluster_from_a_python_path_with_a_space_is_refused(monkeypatch):
    """Ray splits its worker command line at spaces: from such an interpreter no worker starts
    and every task waits forever, so the executor refuses in one line before starting Ray."""
    import ray

    from qkwh.compute.executors import RayExecutor
    from qkwh.errors import QkwhError

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(sys, "executable", "/home/me/my projects/.venv/bin/python")
    with pytest.raises(QkwhError, match="path contains a space") as err:
        RayExecutor()
    assert "/home/me/my projects/.venv/bin/python" in str(err.value)
    assert "\n" not in str(err.value)
    assert not ray.is_initialized()


class _LossyRay:
    """Stands in for the ``ray`` module in :meth:`RayExecutor._cancel`: ``lost[ref]`` cancels of
    a task are lost (the task runs on) before one takes; ``wait`` reports the settled tasks."""

    def __init__(self, lost: dict[str, float]):
        self.lost, self.sent = lost, dict.fromkeys(lost, 0)

    def cancel(self, ref: str, force: bool) -> None:
        assert force
        self.sent[ref] += 1

    def wait(self, refs, num_returns, timeout, fetch_local):
        done = [r for r in refs if self.sent[r] > self.lost[r]]
        return done, [r for r in refs if r not in done]


def test_a_lost_cancel_is_sent_again_until_ray_settles_the_task():
    """Ray can lose a cancel that races a task's start: the executor sends it again to each task
    not yet settled, and gives up after its rounds on a task that never settles."""
    from qkwh.compute import executors

    ex = executors.RayExecutor.__new__(executors.RayExecutor)  # no cluster: _cancel only
    ex._ray = fake = _LossyRay({"queued": 0, "racing": 1, "stuck": float("inf")})
    ex._pending = {"queued", "racing", "stuck"}
    ex._cancel()
    assert fake.sent == {"queued": 1, "racing": 2, "stuck": executors._CANCEL_ROUNDS}
    assert ex._pending == set()
