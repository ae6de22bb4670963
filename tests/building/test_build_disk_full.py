"""`qkwh build` on a full disk: one line naming the cause, exit code 1, and after space is freed
the same build runs to the end.

The warehouse lives on a small tmpfs mounted in a private mount namespace (``unshare -rm``, no
root needed where unprivileged user namespaces are allowed; skipped elsewhere); dbt's own folder
is outside it, so it is DuckDB's writes that find the disk full.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two real dbt builds

SCRIPT = r"""
import json, os, sys
from pathlib import Path
from qkwh import store
from qkwh.build import build
from qkwh.errors import QkwhError

disk, work = Path(sys.argv[1]), Path(sys.argv[2])
wh = disk / "qkwh.duckdb"
store.connect(wh).close()
# fill the disk but for 16 KiB (the marts need far more)
st = os.statvfs(disk)
with open(disk / "filler", "wb") as fh:
    fh.write(b"\0" * (st.f_bavail * st.f_frsize - 16 * 1024))
lines = []
first = {}
try:
    build(wh, target_dir=work / "target", progress=lambda p: p.line and lines.append(p.line))
    first["ok"] = True
except QkwhError as exc:
    first = {"ok": False, "message": str(exc), "exit_code": exc.exit_code}
first["lines"] = lines
(disk / "filler").unlink()  # space freed
res = build(wh, target_dir=work / "target", progress=lambda p: None)
print(json.dumps({"first": first, "second": {"ok": res.success, "failed": len(res.failed),
                                             "nodes": len(res.nodes)}}))
"""


def _namespaces_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    r = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def test_disk_full_during_build_is_one_line_and_a_rerun_works(tmp_path: Path):
    if not _namespaces_work(tmp_path):
        pytest.skip("needs `unshare -rm` and tmpfs mounts (unprivileged user namespaces)")
    disk, work = tmp_path / "disk", tmp_path / "work"
    disk.mkdir()
    work.mkdir()
    script = tmp_path / "full_disk_build.py"
    script.write_text(SCRIPT)
    q = shlex.quote  # the paths may hold spaces
    shell = (
        f"mount -t tmpfs -o size=64m tmpfs {q(str(disk))} && "
        f"exec {q(sys.executable)} {q(str(script))} {q(str(disk))} {q(str(work))}"
    )
    r = subprocess.run(
        ["unshare", "-rm", "sh", "-c", shell],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    first, second = out["first"], out["second"]
    assert not first["ok"] and first["exit_code"] == 1
    message = first["message"]
    assert "\n" not in message and "the disk is full (no space left on device)" in message
    assert "free space and run it again" in message
    # the console hears of it once (the error), not once per node that fails after
    assert [ln for ln in first["lines"] if not ln.startswith("dbt: building")] == []
    assert second == {"ok": True, "failed": 0, "nodes": second["nodes"]} and second["nodes"] > 100
    assert r.stderr.count("\n") <= 2, r.stderr[-4000:]
