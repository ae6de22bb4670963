"""Ray drivers for tests/compute/test_ray.py, each run in a process of its own.

The test process itself never connects to Ray: a Ray driver keeps native threads that outlive
``ray.shutdown()``, and a process that connects, shuts down and connects again (as four tests in
one process did) crashed once in Ray's own code under load.  Each driver here is a fresh process:

``python tests/compute/ray_processes.py cluster``
    starts a head node and a worker node (1 CPU each, Ray's own test utilities), prints one JSON
    line ``{"address": ..., "nodes": 2}`` and keeps them until its standard input is closed.
``python tests/compute/ray_processes.py cancel ADDRESS FOLDER``
    runs the cancellation case (see :func:`cancel`) against the cluster at ADDRESS; exits 0 when
    every check holds, else 1 with the failed check on stderr.  Each step is logged to stderr as
    it starts, and a case still running after ``WATCHDOG_S`` prints Ray's nodes, its free
    resources, the Ray worker processes and every thread's stack, then exits 2: a hang shows
    where it hung.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path

WATCHDOG_S = 420  # the test's own bound on the driver is 600 s
GET_S = 240  # the bound on settling one cancelled task


def cluster() -> None:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        print(json.dumps({"address": c.address, "nodes": len(c.list_all_nodes())}), flush=True)
        sys.stdin.read()  # until the test closes our stdin (or dies)
    finally:
        c.shutdown()


def _marked_task(item: tuple[str, int]) -> int:
    """Mark the start (with the worker's pid); task 0 returns at once, the others wait for the file
    ``release`` (created only when the case is done), then mark the end."""
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


_STARTED = time.monotonic()


def _step(what: str) -> None:
    print(f"[{time.monotonic() - _STARTED:7.2f} s] {what}", file=sys.stderr, flush=True)


def _watchdog(seconds: float) -> threading.Timer:
    def fire() -> None:
        _step(f"still running after {seconds:.0f} s: Ray's nodes and workers, then the stacks")
        try:
            import subprocess

            import ray

            for n in ray.nodes():
                print(f"  node {n['NodeManagerAddress']} alive={n['Alive']}", file=sys.stderr)
            print(f"  available {ray.available_resources()}", file=sys.stderr)
            ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True)
            for line in ps.stdout.splitlines():
                if "ray::" in line:  # Ray titles a worker after the task it runs
                    print(f"  {line.strip()}", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - a diagnostic only
            print(f"  (Ray's state unavailable: {exc!r})", file=sys.stderr)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(2)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def cancel(address: str, folder: str) -> None:
    """Tasks 1.. never finish on their own (they wait for a file), so no timing decides the
    outcome: stopping the caller (KeyboardInterrupt after the first result) must cancel every task
    submitted after the first, and none of them may finish."""
    import ray

    from qkwh.compute.executors import RayExecutor

    watchdog = _watchdog(WATCHDOG_S)
    _step(f"connecting to {address}")
    items = [(folder, i) for i in range(8)]
    ex = RayExecutor(address, in_flight=2)
    submitted = ex._task = _Submissions(ex._task)
    got: list[int] = []
    try:
        _step("submitting; the first result interrupts the caller")
        try:
            for value in ex.map_unordered(_marked_task, items):
                got.append(value)
                raise KeyboardInterrupt  # what Ctrl-C does in the parent
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the interrupt did not reach the caller")
        _step("interrupted: the executor returned")
        assert got == [0], got
        # items 0 and 1 went in first; item 2 replaced item 0 when it finished: nothing beyond
        # the in-flight window was submitted
        assert len(submitted.refs) == 3, len(submitted.refs)
        assert ray.get(submitted.refs[0], timeout=600) == 0
        for i, ref in enumerate(submitted.refs[1:], 1):  # queued or running: each cancelled
            _step(f"getting task {i}")
            try:
                ray.get(ref, timeout=GET_S)  # a task left running would hold this to the bound
            except (ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError):
                continue
            raise AssertionError("a task submitted after the interrupt was not cancelled")
    except ray.exceptions.GetTimeoutError:
        raise AssertionError(
            f"a task submitted after the interrupt was not settled within {GET_S} s"
        ) from None
    finally:
        Path(folder, "release").touch()  # frees any task a failure above left running
        _step("closing")
        ex.close()
        watchdog.cancel()
    ended = sorted(p.name for p in Path(folder).glob("end-*"))
    assert ended == ["end-0"], ended  # running and queued tasks stopped
    assert len(list(Path(folder).glob("start-*"))) <= 3


if __name__ == "__main__":
    if sys.argv[1] == "cluster":
        cluster()
    else:
        try:
            cancel(sys.argv[2], sys.argv[3])
        except AssertionError as exc:
            print(f"check failed: {exc!r}", file=sys.stderr)
            sys.exit(1)
