"""What kill -9, Ctrl-C, a full disk, a read-only folder, a hand-altered table and a second
compute through a hard link do to `qkwh compute`: every fault gets one line and its exit code,
no process outlives the compute, and the warehouse keeps whole heads only (a rerun completes
and equals an uninterrupted run).

Processes are driven to the point of the fault by events (children in /proc, a marker file
written by the writer's test hook, the lock file), never by fixed sleeps.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qkwh.cli import app
from tests.conftest import snapshot

REPO = Path(__file__).resolve().parents[2]
MODEL = "synth-faults"
RESULT_TABLES = ("pca_heads", "rotation_heads", "plasticity_heads")
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "QKWH_WAREHOUSE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _qkwh(*args: str) -> list[str]:
    return [sys.executable, "-m", "qkwh.cli", *args]


def _wait_for(what: str, check, timeout: float = 300.0, proc: subprocess.Popen | None = None):
    """Poll ``check()`` until it returns something truthy (bounded; the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (code {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """A warehouse with one synthetic model, ingested and not computed: 32 heads of 4000 rows,
    enough to keep two workers busy for several seconds."""
    tmp = tmp_path_factory.mktemp("faults")
    data, db = tmp / MODEL, tmp / "ingested.duckdb"
    runner = CliRunner()
    for args in (
        [
            "synth",
            str(data),
            "--layers",
            "4",
            "--q-heads",
            "8",
            "--kv-heads",
            "2",
            "--head-dim",
            "64",
            "--rows",
            "4000",
        ],
        ["ingest", str(data), "--model-id", MODEL, "-w", str(db)],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output + r.stderr
    gc.collect()  # connections held by the in-process CLI's tracebacks
    return db


@pytest.fixture(scope="module")
def uninterrupted(ingested: Path, tmp_path_factory) -> dict[str, list[tuple]]:
    """The result tables of a compute that nobody disturbed."""
    db = tmp_path_factory.mktemp("faults-ref") / "ref.duckdb"
    shutil.copy(ingested, db)
    _compute(db)
    return _results(db)


def _compute(db: Path) -> None:
    """An undisturbed `qkwh compute -j 1` of ``db`` in a child process; it must succeed."""
    r = subprocess.run(
        _qkwh("compute", "-w", str(db), "-j", "1"),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        check=False,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def _results(db: Path) -> dict[str, list[tuple]]:
    """Every row of the result tables (head_runs and current_config hold times)."""
    return {
        t: rows
        for t, rows in snapshot(db).items()
        if t.startswith(("pca_", "rotation_", "plasticity_"))
    }


def _assert_whole_heads(db: Path) -> set[tuple]:
    """Every head in head_runs is in every head table, and no head table has a head that head_runs
    lacks: a head is whole or absent.  Returns the heads written."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        done = {
            analysis: set(
                con.execute(
                    "SELECT layer, q_head FROM head_runs WHERE analysis = ?", [analysis]
                ).fetchall()
            )
            for analysis in ("pca", "rotation", "plasticity")
        }
        for table in RESULT_TABLES:
            present = set(con.execute(f"SELECT DISTINCT layer, q_head FROM {table}").fetchall())
            assert present == done[table.split("_")[0]], table
    finally:
        con.close()
    return done["pca"] | done["rotation"] | done["plasticity"]


def _rerun_equals(db: Path, reference: dict[str, list[tuple]]) -> None:
    _compute(db)
    assert _results(db) == reference


def _one_error_line(stderr: str) -> str:
    """The stderr of a failed command: no traceback, and exactly one ``error:`` line."""
    assert "Traceback" not in stderr and "Error:" not in stderr.replace("error:", ""), stderr[
        -3000:
    ]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


# ---------------------------------------------------------------------------------------------
# kill -9: the pool's workers and resource tracker end with the compute
# ---------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), fields[19]


def _children(pid: int) -> dict[int, tuple[str, str]]:
    """pid -> (start time, command line) of the live children of ``pid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None or st[1] != pid or st[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[int(entry.name)] = (st[2], cmdline)
    return found


def _alive(pid: int, start: str) -> bool:
    """The process started at ``start`` still runs (a zombie nobody reaps counts as ended; a
    reused pid is another process)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[2] == start


def _has_numpy(pid: int) -> bool:
    try:
        return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds the workers in /proc (Linux)"
)
def test_kill_9_of_compute_ends_its_workers_and_resource_tracker(ingested: Path, tmp_path: Path):
    db = tmp_path / "wh.duckdb"
    shutil.copy(ingested, db)
    log = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        _qkwh("compute", "-w", str(db), "-j", "2"),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    children: dict[int, tuple[str, str]] = {}
    try:

        def busy():  # two workers running tasks (numpy loaded) and the resource tracker
            kids = _children(proc.pid)
            workers = [p for p, (_, cmd) in kids.items() if "spawn_main" in cmd and _has_numpy(p)]
            tracker = [p for p, (_, cmd) in kids.items() if "resource_tracker" in cmd]
            return kids if len(workers) == 2 and tracker else None

        children = _wait_for("two busy workers", busy, proc=proc)
        proc.kill()
        assert proc.wait(60) == -signal.SIGKILL  # killed while computing, not finished

        def survivors():
            return [p for p, (start, _) in children.items() if _alive(p, start)]

        try:
            _wait_for("the workers to end", lambda: not survivors(), timeout=60)
        except AssertionError:
            pytest.fail(
                f"processes outlived the killed compute: "
                f"{[children[p][1][:80] for p in survivors()]}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, (start, _) in children.items():  # never leave our orphans behind
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        log.close()
    _assert_whole_heads(db)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_gone(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# Ctrl-C while a batch is committed
# ---------------------------------------------------------------------------------------------


def test_ctrl_c_during_a_batch_commit_exits_130_with_one_line_and_resumes(
    ingested: Path, uninterrupted, tmp_path: Path
):
    db = tmp_path / "wh.duckdb"
    shutil.copy(ingested, db)
    marker = tmp_path / "holding"
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as log:
        # the writer's test hook holds the first batch's transaction open, inside DuckDB, once its
        # rows are all in: the Ctrl-C reaches DuckDB in the middle of the commit
        proc = subprocess.Popen(
            _qkwh("compute", "-w", str(db), "-j", "1"),
            cwd=REPO,
            # a process that does not end is stopped with SIGABRT below: PYTHONFAULTHANDLER
            # writes its threads' stacks to stderr.txt (what it waited for)
            env=_env(QKWH_TEST_HOLD_COMMIT=str(marker), PYTHONFAULTHANDLER="1"),
            stdout=subprocess.DEVNULL,
            stderr=log,
            # Ctrl-C must reach it even when this test runs in a background job (`make test &`
            # in a script): such a job inherits SIGINT ignored, and Python then installs no
            # KeyboardInterrupt handler (every SIGINT below was lost in such a run)
            preexec_fn=_default_sigint,
        )
        try:
            _wait_for("the writer to hold its commit", marker.exists, proc=proc)
            # DuckDB loses a SIGINT that lands as its statement starts (a user would press Ctrl-C
            # again): press again only while the hook's statement provably still runs
            deadline = time.monotonic() + 120
            while marker.exists() and proc.poll() is None and time.monotonic() < deadline:
                proc.send_signal(signal.SIGINT)
                _wait_for_gone(marker, 2.0)
            try:
                code = proc.wait(300)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                proc.wait(60)
                log.flush()
                raise AssertionError(
                    "compute did not end after Ctrl-C; its stacks:\n" + stderr.read_text()[-6000:]
                ) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = stderr.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 130, text[-3000:]
    assert "Traceback" not in text and "Query interrupted" not in text, text[-3000:]
    assert [line for line in lines if "interrupted" in line] == [lines[-1]], text[-3000:]
    assert (
        _assert_whole_heads(db) == set()
    )  # the held batch was rolled back: no head, not part of one
    _rerun_equals(db, uninterrupted)


HALF_A_RESULT = """
import os, struct, sys
from qkwh.compute.executors import ProcessExecutor

ex = ProcessExecutor(1)
assert list(ex.map_unordered(abs, [-1])) == [1]  # the pool runs: its manager thread is up
ex._finished = False  # as if Ctrl-C came while tasks ran
# what a worker killed while it sent a big result leaves in the result pipe: the length of a
# message and only its first bytes; the pool's manager thread now waits for the rest
os.write(ex._pool._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
ex.close()
print("closed", flush=True)
"""


def test_a_worker_killed_while_sending_its_result_does_not_hang_the_exit():
    """Seen once in a loaded `make test`: after Ctrl-C, compute printed its line and never ended
    (the interpreter joined a pool thread that waited for the rest of a killed worker's result)."""
    proc = subprocess.run(
        [sys.executable, "-c", HALF_A_RESULT],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,  # a bound, not a timing: the process ends at once or never
    )
    assert proc.returncode == 0 and proc.stdout == "closed\n", proc.stderr[-2000:]


def test_a_released_pool_lets_its_workers_exit_and_close_waits_for_them():
    """After every task, compute releases the pool (the workers exit while it writes its last
    batch), then closes it: close returns only once the workers are gone."""
    from qkwh.compute.executors import ProcessExecutor

    ex = ProcessExecutor(2)
    try:
        assert sorted(ex.map_unordered(abs, [-3, -1, -2])) == [1, 2, 3]
        workers = list(ex._pool._processes.values())
        assert workers and all(p.is_alive() for p in workers)
        ex.release()
    finally:
        ex.close()
    assert [p.exitcode for p in workers] == [0] * len(workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a glibc setting")
@pytest.mark.parametrize("before", [None, "glibc.malloc.check=0"])
def test_pool_workers_start_with_huge_pages_and_the_parent_environment_stays(monkeypatch, before):
    """The workers start with glibc's huge-page tunable added to GLIBC_TUNABLES (what the user set
    stays in it); this process's own environment is left as it was."""
    from qkwh.compute.executors import HUGE_PAGES_TUNABLE, ProcessExecutor

    if before is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", before)
    ex = ProcessExecutor(2)
    try:
        seen = set(ex.map_unordered(os.getenv, ["GLIBC_TUNABLES"] * 4))
        ex.release()
    finally:
        ex.close()
    assert seen == {HUGE_PAGES_TUNABLE if before is None else f"{before}:{HUGE_PAGES_TUNABLE}"}
    assert os.environ.get("GLIBC_TUNABLES") == before


# ---------------------------------------------------------------------------------------------
# one line, the README's exit code and whole heads: full disk, read-only folders, an altered
# table, the same warehouse through a hard link
# ---------------------------------------------------------------------------------------------


def _heads_written(db: Path) -> int:
    """head_runs rows of a warehouse another process is writing (0 while it holds the file)."""
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return 0
    try:
        return con.execute("SELECT count(*) FROM head_runs").fetchone()[0]
    finally:
        con.close()


@pytest.fixture
def permissions_hold() -> list[str]:
    """A command prefix under which a read-only folder stops the command: none for a normal
    user; as root (who ignores permission bits) setpriv drops CAP_DAC_OVERRIDE and friends."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip(
            "running as root without setpriv: a read-only folder would not stop the command"
        )
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    probe = Path(tempfile.mkdtemp())
    try:
        probe.chmod(0o555)
        r = subprocess.run([*prefix, "touch", str(probe / "x")], capture_output=True, check=False)
    finally:
        probe.chmod(0o755)
        shutil.rmtree(probe)
    if r.returncode == 0 or b"Operation not permitted" in r.stderr:
        pytest.skip(f"cannot drop root's permission override here: {r.stderr.decode().strip()}")
    return prefix


def test_compute_at_a_read_only_location(
    ingested: Path, tmp_path: Path, permissions_hold: list[str]
):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "wh.duckdb"
    shutil.copy(ingested, db)
    before = snapshot(db)
    db.chmod(0o444)
    folder.chmod(0o555)
    try:
        r = subprocess.run(
            [*permissions_hold, *_qkwh("compute", "-w", str(db), "-j", "1")],
            cwd=REPO,
            env=_env(),
            capture_output=True,
            check=False,
            text=True,
            timeout=600,
        )
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)
    assert r.returncode == 1, r.stderr[-3000:]
    line = _one_error_line(r.stderr)
    assert (
        f"{db}.compute.lock" in line and "Permission denied" in line and "must be writable" in line
    )
    assert snapshot(db) == before
    assert sorted(p.name for p in folder.iterdir()) == ["wh.duckdb"]


def test_folder_made_read_only_mid_compute(
    ingested: Path, uninterrupted, tmp_path: Path, permissions_hold: list[str]
):
    folder = tmp_path / "rw"
    folder.mkdir()
    db = folder / "wh.duckdb"
    shutil.copy(ingested, db)
    proc = subprocess.Popen(
        [*permissions_hold, *_qkwh("compute", "-w", str(db), "-j", "1")],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for("the first batch", lambda: _heads_written(db) > 0, proc=proc)
        folder.chmod(0o555)  # DuckDB can no longer create the warehouse's .wal beside it
        _, stderr = proc.communicate(timeout=600)
    finally:
        folder.chmod(0o755)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr[-3000:]
    line = _one_error_line(stderr)  # not the lock file's unlink error
    assert f"cannot write warehouse {db}" in line and f'"{db}.wal": Permission denied' in line, line
    assert _assert_whole_heads(db)  # the heads of the first batch are kept, each whole
    _rerun_equals(db, uninterrupted)


def _mount_works(where: Path) -> bool:
    r = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tmpfs",
            str(where),
        ],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def test_disk_full_during_compute(ingested: Path, uninterrupted, tmp_path: Path):
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    if os.geteuid() != 0 or shutil.which("unshare") is None or not _mount_works(mnt):
        pytest.skip(
            "needs root and `unshare --mount` to mount a small tmpfs (a full disk) in a private namespace"
        )
    # in a private mount namespace (gone with the process): a tmpfs with room for the ingested
    # warehouse and 768 KiB, too little for the results; the folder is copied out afterwards
    size = (os.path.getsize(ingested) + 768 * 1024 + 4095) // 4096 * 4096
    script = (
        'mount -t tmpfs -o size="$SIZE" tmpfs "$MNT" && cp "$SRC" "$MNT/wh.duckdb" || exit 99\n'
        '"$@"; rc=$?\ncp -a "$MNT/." "$OUT/"\nexit $rc\n'
    )
    env = _env(SIZE=str(size), MNT=str(mnt), SRC=str(ingested), OUT=str(out))
    r = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            *_qkwh("compute", "-w", str(mnt / "wh.duckdb"), "-j", "1"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=900,
    )
    assert r.returncode == 1, r.stderr[-3000:]
    line = _one_error_line(r.stderr)
    assert (
        f"cannot write warehouse {mnt / 'wh.duckdb'}" in line and "No space left on device" in line
    ), line
    db = out / "wh.duckdb"
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".lock")) == []
    _assert_whole_heads(db)
    _rerun_equals(db, uninterrupted)


def test_a_dropped_result_column_is_one_line_and_changes_nothing(ingested: Path, tmp_path: Path):
    import duckdb

    db = tmp_path / "wh.duckdb"
    shutil.copy(ingested, db)
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE pca_heads DROP COLUMN fisher_pc0")  # a user's hand edit
    con.close()
    before = snapshot(db)
    r = subprocess.run(
        _qkwh("compute", "-w", str(db), "-j", "1"),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        check=False,
        text=True,
        timeout=600,
    )
    assert r.returncode == 1, r.stderr[-3000:]
    line = _one_error_line(r.stderr)
    assert (
        "table pca_heads has no column fisher_pc0 (DOUBLE)" in line
        and "qkwh compute -a pca --force" in line
    )
    assert snapshot(db) == before  # not even run_config


def test_two_computes_through_hard_linked_paths(ingested: Path, tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "wh.duckdb", tmp_path / "b" / "wh.duckdb"
    shutil.copy(ingested, first)
    os.link(first, second)  # one file, two paths: two lock files beside them
    before = snapshot(first)
    # a compute through the first path, between two batches (its lock held, the file closed)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys; from qkwh.compute.runner import compute_lock\n"
                "with compute_lock(sys.argv[1]):\n    print('holding', flush=True); sys.stdin.read()"
            ),
            str(first),
        ],
        cwd=REPO,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        r = subprocess.run(
            _qkwh("compute", "-w", str(second), "-j", "1"),
            cwd=REPO,
            env=_env(),
            capture_output=True,
            check=False,
            text=True,
            timeout=600,
        )
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 3, r.stderr[-3000:]
    line = _one_error_line(r.stderr)
    assert line == (
        f"error: another qkwh compute (process {holder.pid}) is running on {second} through {first}, "
        "the same file; wait for it to finish"
    )
    assert snapshot(second) == before
