"""A local stand-in for the Hugging Face Hub, just enough for ``snapshot_download``.

Runs an ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port) in a daemon thread of
the test process; use it as a context manager (it stops itself on exit).  Point
``huggingface_hub`` at it with ``HF_ENDPOINT=<server.endpoint>`` (or ``endpoint=``).

Endpoints (what huggingface_hub 2.4.0's ``snapshot_download``/``hf_hub_download`` call; read from
``_snapshot_download.py``, ``file_download.py``, ``hf_api.py``, ``utils/_http.py``):

* ``GET /api/datasets/{owner}/{name}/revision/{rev}`` (``HfApi.dataset_info``, via ``repo_info``):
  JSON with ``id``, ``sha`` (the commit) and ``siblings`` (older huggingface_hub lists files from
  these).  ``GET /api/datasets/{owner}/{name}`` is the same for ``main``.
* ``GET /api/datasets/{owner}/{name}/tree/{rev}[/{path}]?recursive=...`` (``HfApi.list_repo_tree``,
  which 2.x ``snapshot_download`` uses to list files): a JSON array of ``{"type": "file", "path",
  "size", "oid", "lfs"?}`` and ``{"type": "directory", "path", "oid"}``; no pagination (no ``Link``).
* ``HEAD /datasets/{owner}/{name}/resolve/{rev}/{path}`` (``get_hf_file_metadata``): 200 with
  ``X-Repo-Commit``, ``ETag`` (sha256 for LFS-like ``*.parquet`` files, the git blob sha1 for the
  others), ``Content-Length`` and ``Accept-Ranges: bytes``.  No redirect, and deliberately no
  ``X-Xet-Hash``/``X-Xet-*`` headers or ``xetHash`` tree fields, so the plain-HTTP path is used.
* ``GET`` of the same URL: the bytes; ``Range: bytes=a-[b]`` gives 206 + ``Content-Range``
  (416 if unsatisfiable).

What ``HfFileSystem`` (fsspec) and ``HfApi.list_repo_refs`` call besides (read from
``hf_file_system.py`` and ``hf_api.py`` of huggingface_hub 2.4.0):

* the ``tree`` listing honours ``recursive`` (without it: direct children only) and is paginated
  like the Hub's: at most :attr:`HubStandIn.page_size` entries per answer, the next page named by
  a ``Link: <...?cursor=N>; rel="next"`` header;
* ``POST /api/datasets/{owner}/{name}/paths-info/{rev}`` (``HfApi.get_paths_info``, used by
  ``HfFileSystem.info``/``modified``): form fields ``paths`` (repeated) and ``expand``; with
  ``expand`` each entry carries ``lastCommit`` (DuckDB asks fsspec for a file's modification time);
* ``GET /api/datasets/{owner}/{name}/refs``: ``branches`` (name, ``refs/heads/...``, ``targetCommit``),
  empty ``tags`` and ``converts``.

Branches can be changed while the server runs (:meth:`HubStandIn.put`, :meth:`HubStandIn.delete`).

Errors use the Hub's ``X-Error-Code`` header, which ``hf_raise_for_status`` maps to exceptions:
``RepoNotFound`` (unknown repo), ``RevisionNotFound`` (unknown branch/commit), ``EntryNotFound``
(unknown file).  HTTP/1.0 with one connection per request, so nothing stays pooled in the client.

Fault injection for file GETs (``cut_next``/``fail_next``): *cut* sends the headers with the full
``Content-Length``, writes only the first *after* bytes of the body and then half-closes the
socket (FIN, not RST, so the client sees everything that was sent); *status* answers with an HTTP
error.  Every request is recorded in :attr:`HubStandIn.requests`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".parquet",)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class ServedFile:
    path: str
    data: bytes
    sha256: str = field(init=False)  # hashed once: listings are asked for again and again
    etag: str = field(init=False)

    def __post_init__(self) -> None:
        sha = hashlib.sha256(self.data).hexdigest()
        object.__setattr__(self, "sha256", sha)
        object.__setattr__(self, "etag", sha if self.is_lfs else git_blob_sha1(self.data))

    @property
    def is_lfs(self) -> bool:
        return self.path.endswith(LFS_SUFFIXES)

    def tree_entry(self) -> dict:
        if not self.is_lfs:
            return {
                "type": "file",
                "path": self.path,
                "size": len(self.data),
                "oid": git_blob_sha1(self.data),
            }
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {len(self.data)}\n"
        ).encode()
        return {
            "type": "file",
            "path": self.path,
            "size": len(self.data),
            "oid": git_blob_sha1(pointer),
            "lfs": {"oid": self.sha256, "size": len(self.data), "pointerSize": len(pointer)},
        }


@dataclass
class Branch:
    name: str
    files: dict[str, ServedFile]

    @property
    def sha(self) -> str:
        digest = hashlib.sha1(self.name.encode())
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + self.files[path].etag.encode())
        return digest.hexdigest()


@dataclass
class RequestRecord:
    method: str
    path: str  # URL path, percent-decoded
    range: str | None  # the Range header as sent
    status: int = 0
    bytes_sent: int = 0  # body bytes sent (or being sent)
    cut: bool = False  # the connection was cut after `bytes_sent` body bytes (fault injection)
    filename: str | None = None  # repo path, for /resolve/ requests
    revision: str | None = None


@dataclass
class _Fault:
    kind: str  # "cut" | "status"
    after: int = 0
    status: int = 503


@dataclass
class HubStandIn:
    """Serves ``repo_id`` with ``branches`` = {branch name: {repo path: bytes}}: a dataset
    repository, or a model repository with ``repo_type="model"`` (``/{repo_id}/resolve/...``,
    ``/api/models/{repo_id}``)."""

    repo_id: str
    branches: dict[str, dict[str, bytes]]
    request_timeout: float = 10.0  # per-connection socket timeout (seconds)
    page_size: int = 1000  # tree entries per answer (the Hub's page size without expand)
    repo_type: str = "dataset"  # 'dataset' | 'model'
    requests: list[RequestRecord] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._branches = {
            name: Branch(name, {p: ServedFile(p, d) for p, d in files.items()})
            for name, files in self.branches.items()
        }
        self._lock = threading.Lock()
        self._faults: dict[str, deque[_Fault]] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HubStandIn:
        handler = type("Handler", (_Handler,), {"hub": self, "timeout": self.request_timeout})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="hub-stand-in",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> HubStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- test helpers
    def commit(self, branch: str) -> str:
        return self._branches[branch].sha

    def cut_next(self, path: str, after: int, times: int = 1) -> None:
        """The next *times* GETs of repo file *path* stop after *after* body bytes."""
        with self._lock:
            self._faults.setdefault(path, deque()).extend(
                _Fault("cut", after=after) for _ in range(times)
            )

    def fail_next(self, path: str, status: int = 503, times: int = 1) -> None:
        """The next *times* GETs of repo file *path* answer HTTP *status*."""
        with self._lock:
            self._faults.setdefault(path, deque()).extend(
                _Fault("status", status=status) for _ in range(times)
            )

    def put(self, branch: str, path: str, data: bytes) -> None:
        """Add or replace one file of *branch* (creating the branch); its commit changes."""
        with self._lock:
            target = self._branches.setdefault(branch, Branch(branch, {}))
            target.files[path] = ServedFile(path, data)

    def delete(self, branch: str, path: str) -> None:
        """Remove one file of *branch*; its commit changes."""
        with self._lock:
            del self._branches[branch].files[path]

    def bytes_sent(self, prefix: str = "") -> int:
        """Body bytes of file GETs whose repo path starts with *prefix*."""
        with self._lock:
            return sum(
                r.bytes_sent
                for r in self.requests
                if r.method == "GET" and r.filename is not None and r.filename.startswith(prefix)
            )

    def file_gets(self, path: str) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and r.filename == path]

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # ---------------------------------------------------------------- internals
    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.requests.append(record)

    def _take_fault(self, path: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(path)
            return queue.popleft() if queue else None

    def _branch(self, revision: str) -> Branch | None:
        if revision in self._branches:
            return self._branches[revision]
        for branch in self._branches.values():
            if branch.sha == revision:
                return branch
        return None


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn  # set on the per-server subclass
    protocol_version = "HTTP/1.0"  # one request per connection
    server_version = "HubStandIn/1.0"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - keep test output quiet
        pass

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_POST(self) -> None:
        path = unquote(urlsplit(self.path).path)
        record = RequestRecord(method="POST", path=path, range=None)
        self.hub._record(record)
        prefix = f"/api/{self.hub.repo_type}s/{self.hub.repo_id}/paths-info/"
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode()) if length else {}
        if not path.startswith(prefix):
            self._error(record, 404, None, "Not Found")
            return
        revision = path[len(prefix) :]
        branch = self.hub._branch(revision)
        if branch is None:
            self._error(record, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        record.revision = revision
        expand = form.get("expand", ["False"])[0].lower() == "true"
        tree = {e["path"]: e for e in self._tree(branch, "", recursive=True)}
        found = []
        for wanted in form.get("paths", []):
            entry = tree.get(wanted.strip("/"))
            if entry is not None:
                if expand:
                    entry = {
                        **entry,
                        "lastCommit": {
                            "id": branch.sha,
                            "title": "capture",
                            "date": "2025-01-01T00:00:00.000Z",
                        },
                    }
                found.append(entry)
        self._send(record, 200, json.dumps(found).encode(), {"Content-Type": "application/json"})

    # ---------------------------------------------------------------- routing
    def _dispatch(self, *, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        record = RequestRecord(method=self.command, path=path, range=self.headers.get("Range"))
        self.hub._record(record)
        prefix_api = f"/api/{self.hub.repo_type}s/{self.hub.repo_id}"
        prefix_resolve = (
            "/datasets" if self.hub.repo_type == "dataset" else ""
        ) + f"/{self.hub.repo_id}/resolve/"
        try:
            if path.startswith(prefix_resolve):
                self._resolve(record, path[len(prefix_resolve) :], head=head)
            elif path == prefix_api or path.startswith(prefix_api + "/"):
                if head:
                    self._send(record, 405, b"")
                else:
                    self._api(record, path[len(prefix_api) :])
            elif path.startswith(("/api/datasets/", "/datasets/")):
                self._error(record, 404, "RepoNotFound", "Repository not found")
            else:
                self._error(record, 404, None, "Not Found")
        except (BrokenPipeError, ConnectionResetError):  # client went away: nothing to answer
            pass

    def _api(self, record: RequestRecord, rest: str) -> None:
        if rest == "/refs":
            branches = [
                {"name": b.name, "ref": f"refs/heads/{b.name}", "targetCommit": b.sha}
                for b in self.hub._branches.values()
            ]
            body = {"branches": branches, "converts": [], "tags": []}
            self._send(record, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            return
        if rest in ("", "/"):
            revision, sub = "main", None
        elif rest.startswith("/revision/"):
            revision, sub = rest[len("/revision/") :], None
        elif rest.startswith("/tree/"):
            # The client percent-encodes the revision (safe=""); once unquoted it may contain "/".
            revision, sub = self._split_revision(rest[len("/tree/") :])
            sub = sub or ""
        else:
            self._error(record, 404, None, "Not Found")
            return
        branch = self.hub._branch(revision)
        if branch is None:
            self._error(record, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        record.revision = revision
        if sub is None:
            owner = self.hub.repo_id.split("/")[0]
            body = {
                "_id": branch.sha[:24],
                "id": self.hub.repo_id,
                "author": owner,
                "sha": branch.sha,
                "lastModified": "2025-01-01T00:00:00.000Z",
                "private": False,
                "gated": False,
                "disabled": False,
                "tags": [],
                "siblings": [{"rfilename": p} for p in sorted(branch.files)],
            }
        else:
            query = parse_qs(urlsplit(self.path).query)
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            entries = self._tree(branch, sub.strip("/"), recursive=recursive)
            start = int(query.get("cursor", ["0"])[0])
            size = max(1, self.hub.page_size)
            page = entries[start : start + size]
            headers = {"Content-Type": "application/json"}
            if start + size < len(entries):
                url = urlsplit(self.path)
                params = [(k, v) for k, vs in query.items() if k != "cursor" for v in vs]
                params.append(("cursor", str(start + size)))
                next_query = "&".join(f"{quote(k)}={quote(v)}" for k, v in params)
                headers["Link"] = f'<{self.hub.endpoint}{url.path}?{next_query}>; rel="next"'
            self._send(record, 200, json.dumps(page).encode(), headers)
            return
        self._send(record, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    @staticmethod
    def _tree(branch: Branch, sub: str, *, recursive: bool = True) -> list[dict]:
        prefix = f"{sub}/" if sub else ""
        entries: dict[str, dict] = {}
        for path in sorted(branch.files):
            if not path.startswith(prefix):
                continue
            parts = path.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder.startswith(prefix) and folder not in entries:
                    oid = hashlib.sha1(folder.encode()).hexdigest()
                    entries[folder] = {"type": "directory", "path": folder, "oid": oid}
            entries[path] = branch.files[path].tree_entry()
        if not recursive:  # direct children of the folder only
            depth = prefix.count("/") + 1
            return [e for p, e in entries.items() if p.count("/") + 1 == depth]
        return list(entries.values())

    def _split_revision(self, text: str) -> tuple[str, str | None]:
        candidates = list(self.hub._branches) + [b.sha for b in self.hub._branches.values()]
        for candidate in sorted(candidates, key=len, reverse=True):
            if text == candidate:
                return candidate, None
            if text.startswith(candidate + "/"):
                return candidate, text[len(candidate) + 1 :]
        revision, _, rest = text.partition("/")
        return revision, rest or None

    def _resolve(self, record: RequestRecord, rest: str, *, head: bool) -> None:
        revision, filename = self._split_revision(rest)
        record.revision, record.filename = revision, filename
        branch = self.hub._branch(revision)
        if branch is None:
            self._error(record, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        served = branch.files.get(filename or "")
        if served is None:
            self._error(
                record,
                404,
                "EntryNotFound",
                f"{filename} does not exist on {revision}",
                {"X-Repo-Commit": branch.sha},
            )
            return
        data = served.data
        headers = {
            "X-Repo-Commit": branch.sha,
            "ETag": f'"{served.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if head:
            headers["Content-Length"] = str(len(data))
            self._send(record, 200, b"", headers, head=True)
            return

        fault = self.hub._take_fault(filename or "")
        if fault is not None and fault.kind == "status":
            self._error(record, fault.status, None, "injected failure")
            return
        status, body = 200, data
        range_header = self.headers.get("Range")
        if range_header:
            parsed = _parse_range(range_header, len(data))
            if parsed == "unsatisfiable":
                self._send(record, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            if parsed is not None:
                start, end = parsed
                status, body = 206, data[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        if fault is not None and fault.kind == "cut":
            self._send_cut(record, status, body, headers, fault.after)
            return
        self._send(record, status, body, headers)

    # ---------------------------------------------------------------- responses
    def _error(
        self,
        record: RequestRecord,
        status: int,
        code: str | None,
        message: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(record, status, json.dumps({"error": message}).encode(), headers)

    def _send(
        self,
        record: RequestRecord,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        record.status = status
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            record.bytes_sent = len(body)
            self.wfile.write(body)

    def _send_cut(
        self, record: RequestRecord, status: int, body: bytes, headers: dict[str, str], after: int
    ) -> None:
        record.status = status
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        record.bytes_sent, record.cut = min(after, len(body)), True
        self.wfile.write(body[:after])
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_WR)  # FIN after the data: the client reads it all
        except OSError:
            pass


def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """(start, end) inclusive, "unsatisfiable", or None to ignore the header (serve everything)."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":  # suffix range: the last N bytes
            n = int(last)
            return (max(size - n, 0), size - 1) if n > 0 and size else "unsatisfiable"
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "unsatisfiable"
    return start, min(end, size - 1)
