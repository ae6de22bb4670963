"""Sniffed branches read in place on the Hugging Face Hub (``qkwh ingest --remote``).

Nothing is downloaded as a whole: huggingface_hub's fsspec file system (``HfFileSystem``) lists
the branch, reads the dataset card and ``_saver_state.json``, and reads of each parquet file
only its footer (schema, row groups, statistics) and its three integer columns (bucket,
example_id, position: a few per cent of the bytes), never the vectors.  Files are then named by
URIs that any machine with the same Hub endpoint can open itself::

    hf://datasets/OWNER/NAME@BRANCH/l{LL}h{HH}{q|k}/data.parquet

(``BRANCH`` percent-encoded when it contains ``/``).  Compute workers read their files through
the same file system (:func:`open_file`); DuckDB reads them for the ``vectors`` view through a
file system registered on the connection (:func:`register`).

The Hub endpoint comes from ``HF_ENDPOINT`` when the call is made; a token from the usual
huggingface_hub settings (``HF_TOKEN``, the cached login).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import pyarrow.parquet as pq

from qkwh.errors import InputError
from qkwh.sniffed.hub import HubNotFoundError, HubSource, endpoint, hub_error
from qkwh.sniffed.hubfs import (  # noqa: F401 (filesystem, open_file, register: re-exported)
    BLOCK_SIZE,
    DUCKDB_BLOCK,
    INGEST_BLOCK,
    SCHEME,
    _new_filesystem,
    filesystem,
    open_file,
    register,
)
from qkwh.sniffed.layout import CONFIG_RE, DATA_FILE, Layout, SniffedFile, from_folders
from qkwh.sniffed.metadata import DatasetMetadata, metadata_from_texts
from qkwh.sniffed.reader import read_file
from qkwh.sniffed.validate import FileStats, stats_of

_METADATA_FILES = ("README.md", "_saver_state.json")


def branch_uri(source: HubSource, revision: str | None = None) -> str:
    """``hf://datasets/OWNER/NAME@BRANCH`` (the branch, or ``revision``, percent-encoded)."""
    return f"{SCHEME}{source.repo_type}s/{source.repo_id}@{quote(revision or source.revision, safe='')}"


# ------------------------------------------------------------------------------------------
# reading a branch


@dataclass(frozen=True)
class RemoteBranch:
    """One listed branch: its commit, its files (URI -> fsspec info) and the file system used."""

    source: HubSource
    commit: str
    infos: dict[str, dict[str, Any]]
    fs: Any

    @property
    def root(self) -> str:
        return branch_uri(self.source)

    @property
    def commit_uri(self) -> str:
        """``hf://datasets/OWNER/NAME@COMMIT``: recorded as the model's root (what was cataloged)."""
        return branch_uri(self.source, self.commit)

    def layout(self) -> Layout:
        folders: dict[str, str | None] = {}
        for uri, info in self.infos.items():
            rel = uri[len(self.root) + 1 :]
            folder, _, name = rel.partition("/")
            if info["type"] == "directory" and "/" not in rel:
                folders.setdefault(rel, None)
            elif name == DATA_FILE and info["type"] == "file":
                folders[folder] = uri
        return from_folders(self.root, folders.items())

    def metadata(self) -> DatasetMetadata:
        texts = {}
        for name in _METADATA_FILES:
            uri = f"{self.root}/{name}"
            if uri in self.infos:
                with open_file(uri, size=self.infos[uri]["size"], fs=self.fs) as fh:
                    texts[name] = (uri, fh.read().decode("utf-8", errors="replace"))
        return metadata_from_texts(
            card=texts.get("README.md"), state=texts.get("_saver_state.json")
        )

    def file_stats(self, f: SniffedFile) -> FileStats:
        """Statistics of one file from its footer and integer columns (the vectors are not read)."""
        uri = cast(str, f.path)  # a remote branch's files are hf:// URIs
        info = self.infos[uri]
        # two ranged reads: the footer (kept by the read-ahead cache for read_file's own look at
        # it), then the integer columns; never the vectors
        with open_file(uri, size=info["size"], fs=self.fs, block_size=INGEST_BLOCK) as fh:
            try:
                meta = pq.ParquetFile(fh).metadata
            except Exception:  # noqa: BLE001 - unreadable: read_file says why, as for a local file
                meta = None
            data = read_file(
                f.path, content=fh, with_vectors=False
            )  # the same checks as a local file
            d = footer_vector_length(uri, meta)
        return stats_of(
            f,
            data,
            size=int(info["size"]),
            fingerprint=remote_fingerprint(info),
            n_nonfinite=0,
            d=d,
        )

    def scan_files(self, *, workers: int = 8) -> list[FileStats]:
        layout = self.layout()
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(layout.files)))) as pool:
            return list(pool.map(self.file_stats, layout.files))


def remote_fingerprint(info: dict[str, Any]) -> str:
    """The fingerprint of a remote file without reading it: the sha256 of its content that the
    Hub records for large (LFS/Xet) files, which equals a downloaded copy's fingerprint; for
    files kept in git itself, the git blob id."""
    lfs = info.get("lfs")
    sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
    return sha[:32] if sha else f"blob:{info['blob_id']}"


def footer_vector_length(uri: str, meta: pq.FileMetaData) -> int:
    """The vector length d from the footer: values of the vector column per row, in every row group.

    Raises :class:`InputError` when the count is not a whole multiple of the rows (ragged
    vectors), differs between row groups, or the statistics show null or infinite values.
    """
    schema = meta.schema
    leaf = next(
        (i for i in range(len(schema)) if schema.column(i).path.split(".")[0] == "vector"), None
    )
    if leaf is None:
        raise InputError(f"{uri}: missing column(s) vector")
    lengths = set()
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        col = rg.column(leaf)
        st = col.statistics
        if st is not None and st.has_null_count and st.null_count:
            raise InputError(f"{uri}: column vector has {st.null_count} null element(s)")
        if st is not None and st.has_min_max and not all(map(math.isfinite, (st.min, st.max))):
            raise InputError(f"{uri}: Inf value(s) in column vector (row group {g} statistics)")
        if rg.num_rows == 0:
            continue
        if col.num_values % rg.num_rows:
            raise InputError(
                f"{uri}: vector length differs across rows (row group {g} holds "
                f"{col.num_values} values for {rg.num_rows} rows)"
            )
        lengths.add(col.num_values // rg.num_rows)
    if len(lengths) > 1:
        raise InputError(f"{uri}: vector length differs across row groups ({sorted(lengths)})")
    return lengths.pop() if lengths else 0


def open_branch(source: HubSource) -> RemoteBranch:
    """List ``source`` through the Hub's file system (its commit, files, sizes, content hashes).

    Raises :class:`~qkwh.sniffed.hub.HubNotFoundError` when the repo or branch does not exist or
    the branch holds no sniffed files, :class:`HubError` when the Hub cannot be reached.
    """
    from huggingface_hub import HfApi

    fs = _new_filesystem()
    with hub_error(source):
        commit = (
            HfApi(endpoint=endpoint())
            .repo_info(source.repo_id, repo_type=source.repo_type, revision=source.revision)
            .sha
        )
        root = branch_uri(source)
        listing = fs.find(root, maxdepth=2, withdirs=True, detail=True)
    infos = {_as_uri(name): info for name, info in listing.items()}
    branch = RemoteBranch(source, commit or "", infos, fs)
    if not any(
        uri.endswith("/" + DATA_FILE) and CONFIG_RE.match(uri.split("/")[-2]) for uri in infos
    ):
        present = sorted(u[len(root) + 1 :] for u, i in infos.items() if i["type"] == "file")
        more = ", ..." if len(present) > 5 else ""
        listing_text = f" (it has: {', '.join(present[:5])}{more})" if present else ""
        raise HubNotFoundError(
            f"branch {source.revision} of dataset {source.repo_id} has no l??h??{{q|k}}/data.parquet "
            f"files at its root{listing_text}; is it a sniffed branch?"
        )
    return branch


def _as_uri(name: str) -> str:
    return name if name.startswith(SCHEME) else SCHEME + name


def list_branches(repo: HubSource) -> dict[str, str]:
    """Branch name -> commit of every branch of ``repo`` (tags and pull requests left out)."""
    from huggingface_hub import HfApi

    with hub_error(repo):
        refs = HfApi(endpoint=endpoint()).list_repo_refs(repo.repo_id, repo_type=repo.repo_type)
    return {b.name: b.target_commit for b in sorted(refs.branches, key=lambda b: b.name)}
