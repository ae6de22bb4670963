"""`qkwh compute --executor ray` on a real local Ray cluster: a head and a worker node, 1 CPU each.

The tables equal the process pool's bit for bit; a Ray worker process killed while it runs a
task makes Ray retry the task and the run still writes every head exactly once; Ctrl-C (or any
exception in the caller) cancels what is still queued.  Skipped with the reason when Ray cannot be
imported (`make test` installs it: the `ray` extra).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

ray = pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'qkwh[ray]'; make test installs it)"
)

from qkwh import store  # noqa: E402
from qkwh.cli import app  # noqa: E402
from qkwh.compute.executors import RayExecutor  # noqa: E402
from qkwh.compute.runner import compute  # noqa: E402
from qkwh.config import load_execution, load_run_config  # noqa: E402
from qkwh.ingest import ingest  # noqa: E402
from qkwh.synth import write_dataset  # noqa: E402
from tests.compute.test_compute import RESULT_TABLES, results  # noqa: E402

runner = CliRunner()
N_HEADS = 8  # 2 layers x 4 query heads, 2 KV heads: 4 tasks of 2 heads


@pytest.fixture(scope="module")
def cluster():
    """A head node and one worker node on this machine, 1 CPU each (Ray's own test utilities)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


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
    r = runner.invoke(
        app, ["compute", "-w", str(db), "--executor", "ray", "--ray-address", cluster.address]
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert f"computed {N_HEADS} head(s)" in r.output
    assert results(db) == pool_results  # every row of every table, bit for bit
    # both nodes were in the cluster the run used
    assert len(cluster.list_all_nodes()) == 2


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
        report = compute(db, executor="ray", ray_address=cluster.address)
        fetched = {q.filename for q in hub.requests if q.method == "GET" and q.filename}
    assert report.failures == [] and report.n_written == N_HEADS
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
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["report"] = compute(db, executor="ray", ray_address=cluster.address)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        pids = _ray_task_pids()
        if pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=300)
    assert killed is not None, "no Ray worker was seen running a task"
    assert "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert report.failures == [] and report.n_written == N_HEADS  # the lost task was run again
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


def _marked_task(item: tuple[str, int]) -> int:
    """Test task: mark the start (with the worker's pid); task 0 returns at once, the others wait
    for the file ``release`` (which the test creates only when it is done), then mark the end."""
    folder, i = item
    Path(folder, f"start-{i}").write_text(str(os.getpid()))
    if i > 0:
        deadline = time.monotonic() + 600  # a bound, so that a leaked task cannot run forever
        while not Path(folder, "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    Path(folder, f"end-{i}").touch()
    return i


class _Submissions:
    """Wraps the executor's Ray task: keeps the reference of every task submitted."""

    def __init__(self, task):
        self.task, self.refs = task, []

    def remote(self, *args):
        ref = self.task.remote(*args)
        self.refs.append(ref)
        return ref


def _interrupt_after_first_result(ex: RayExecutor, items: list, got: list) -> None:
    for value in ex.map_unordered(_marked_task, items):
        got.append(value)
        raise KeyboardInterrupt  # what Ctrl-C does in the parent


@pytest.mark.slow  # a 2-node Ray cluster
def test_stopping_the_caller_cancels_queued_and_running_tasks(cluster, tmp_path):
    """Tasks 1.. never finish on their own (they wait for a file), so no timing decides the
    outcome: every task submitted after the first must end cancelled, none may have finished."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    items = [(str(tmp_path), i) for i in range(8)]
    ex = RayExecutor(cluster.address, in_flight=2)
    submitted = ex._task = _Submissions(ex._task)
    try:
        got: list[int] = []
        with pytest.raises(KeyboardInterrupt):
            _interrupt_after_first_result(ex, items, got)
        assert got == [0]
        # items 0 and 1 went in first; item 2 replaced item 0 when it finished: nothing beyond the
        # in-flight window was submitted
        assert len(submitted.refs) == 3
        assert ray.get(submitted.refs[0], timeout=120) == 0
        for ref in submitted.refs[1:]:  # queued or running, each one was cancelled
            with pytest.raises(
                (ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)
            ):
                ray.get(ref, timeout=120)  # a task left running would hold this to the timeout
    finally:
        Path(tmp_path, "release").touch()  # frees any task a failure above left running
        ex.close()
    assert sorted(p.name for p in tmp_path.glob("end-*")) == [
        "end-0"
    ]  # running and queued tasks stopped
    assert len(list(tmp_path.glob("start-*"))) <= 3
