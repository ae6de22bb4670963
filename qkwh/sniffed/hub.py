"""Fetch one sniffed branch of a Hugging Face dataset repo into the standard HF cache.

A sniffed dataset (docs/input-format.md) keeps one model/checkpoint per *branch* of ``viktoroo/sniffed-qk``;
the branch root holds ``l{LL}h{HH}{q|k}/data.parquet`` files, ``_saver_state.json`` and
``README.md``.  Users name a branch as ``hf://datasets/<owner>/<name>@<branch>``.

:func:`download` is a thin wrapper around :func:`huggingface_hub.snapshot_download`:

* files land in the standard HF cache (``HF_HUB_CACHE`` / ``HF_HOME``), so they are shared with
  every other HF tool and a repeated call only fetches what is missing;
* ``HF_ENDPOINT``, ``HF_HUB_CACHE``/``HF_HOME``, ``HF_HUB_OFFLINE`` and ``HF_HUB_ETAG_TIMEOUT`` are
  read *when the function is called* (huggingface_hub reads them once, at import time);
* when the Hub cannot be reached, a fully cached snapshot of the branch is returned as is;
* every failure becomes a one-line :class:`HubError` that names the repo, the branch, the endpoint
  and the cache folder.

Resume semantics depend on the installed huggingface_hub; with 2.x (2.4.0 at the time of writing):
an interrupted transfer is resumed *within the same call* with an HTTP ``Range`` request from the
last 10 MiB chunk written to disk; a call that fails keeps every file it completed, but discards the
partial file, so the next call fetches only the missing files, each from byte 0.
See tests/sniffed/test_hub.py for the executable version of these statements.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from qkwh.errors import InputError, NotFoundError, QkwhError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ALLOW_PATTERNS",
    "HubError",
    "HubNotFoundError",
    "HubSource",
    "HubSourceError",
    "download",
    "endpoint",
    "hub_error",
    "parse_hub_source",
    "sniffed_files",
]

#: Files of a sniffed branch that ingestion needs (everything else, e.g. .gitattributes, is skipped).
DEFAULT_ALLOW_PATTERNS: tuple[str, ...] = (
    "l*h*[qk]/data.parquet",
    "_saver_state.json",
    "README.md",
)

#: Branch-name suffix shared by all production captures; not part of the model id.
BRANCH_SUFFIX = "-longbench-pro-128k-plus"

_EXPECTED_FORM = "hf://datasets/<owner>/<name>[@<branch>]"
_EXAMPLE = "hf://datasets/viktoroo/sniffed-qk@qwen3-0.6b-longbench-pro-128k-plus"
# Hugging Face repo-id rules: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 chars.
_REPO_PART = re.compile(r"^(?!.*(--|\.\.))[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# A git branch/tag name (a conservative subset of git-check-ref-format).
_BRANCH = re.compile(r"^(?!/)(?!.*(//|\.\.|@\{|/\.|\.lock$|\.$|/$))[A-Za-z0-9._/+=-]{1,255}$")
_SNIFFED_FILE = re.compile(r"^l\d{2}h\d{2}[qk]/data\.parquet$")


class HubError(QkwhError):
    """Downloading a sniffed branch from the Hugging Face Hub failed (one-line message)."""


class HubNotFoundError(HubError, NotFoundError):
    """The repo or branch does not exist, or the branch holds no sniffed parquet files."""


class HubSourceError(InputError, ValueError):
    """A string starting with ``hf://`` is not of the form ``hf://datasets/<owner>/<name>[@<branch>]``."""


@dataclass(frozen=True)
class HubSource:
    """One branch of a Hugging Face dataset repo."""

    repo_id: str
    revision: str = "main"
    repo_type: str = "dataset"

    @property
    def model_id_guess(self) -> str:
        """The branch name without the production suffix ``-longbench-pro-128k-plus``."""
        stripped = self.revision.removesuffix(BRANCH_SUFFIX)
        return stripped or self.revision

    @property
    def spec(self) -> str:
        """``<owner>/<name>@<branch>``, as used in messages."""
        return f"{self.repo_id}@{self.revision}"

    def __str__(self) -> str:
        return f"hf://{self.repo_type}s/{self.spec}"


def parse_hub_source(source: str) -> HubSource | None:
    """Parse ``hf://datasets/<owner>/<name>[@<branch>]``; ``None`` if *source* is not an hf:// URL.

    The branch defaults to ``main``; it may contain ``/`` (also written ``%2F``).  Anything else that
    starts with ``hf://`` raises :class:`HubSourceError` (a ``ValueError``) quoting *source*.
    """
    text = source.strip()
    if not text.lower().startswith("hf://"):
        return None

    def bad(reason: str) -> HubSourceError:
        return HubSourceError(
            f"invalid Hugging Face source {source!r}: {reason}; expected {_EXPECTED_FORM}, e.g. {_EXAMPLE}"
        )

    rest = text[len("hf://") :]
    kind, _, rest = rest.partition("/")
    if kind != "datasets":
        if not kind and not rest:
            raise bad("no repo given")
        if kind in ("models", "spaces"):
            raise bad(f"only dataset repos are supported, not {kind}")
        raise bad("the path must start with 'datasets/'")
    repo_part, at, revision = rest.partition("@")
    if at:
        revision = unquote(revision).rstrip("/")
        if not revision:
            raise bad("empty branch after '@'")
        if "@" in revision:
            raise bad("more than one '@'")
        if not _BRANCH.match(revision):
            raise bad(f"{revision!r} is not a valid branch name")
    else:
        revision = "main"
    parts = repo_part.rstrip("/").split("/")
    if len(parts) != 2 or not all(parts):
        if len(parts) > 2 and all(parts):
            raise bad("paths inside the repo are not supported (the branch root is always used)")
        raise bad("the repo must be '<owner>/<name>'")
    for part in parts:
        if not _REPO_PART.match(part):
            raise bad(f"{part!r} is not a valid owner or repo name")
    return HubSource(repo_id="/".join(parts), revision=revision)


def sniffed_files(folder: Path) -> list[Path]:
    """The ``l??h??{q|k}/data.parquet`` files directly under *folder*, sorted."""
    found = []
    for path in sorted(folder.glob("l*h*/data.parquet")):
        if _SNIFFED_FILE.match(path.relative_to(folder).as_posix()):
            found.append(path)
    return found


# --------------------------------------------------------------------------------------------
# download


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def endpoint() -> str:
    """The Hub's URL: ``HF_ENDPOINT`` as set now, else huggingface_hub's default."""
    import huggingface_hub.constants as hf_constants

    return (os.environ.get("HF_ENDPOINT") or hf_constants.ENDPOINT).rstrip("/")


def _not_found(source: HubSource, error: BaseException | None) -> HubNotFoundError | None:
    """The one-line error for a repo or branch the Hub does not have (None for other errors)."""
    from huggingface_hub import errors as hf_errors

    where = f"{source.repo_type} {source.repo_id}"
    if isinstance(error, hf_errors.RevisionNotFoundError):
        return HubNotFoundError(f"no branch {source.revision} in {where} on {endpoint()}")
    if isinstance(error, hf_errors.RepositoryNotFoundError):  # also GatedRepoError
        return HubNotFoundError(
            f"no {where} on {endpoint()} (or it is private or gated and no valid HF token is set)"
            f" while looking for branch {source.revision}"
        )
    return None


@contextlib.contextmanager
def hub_error(source: HubSource) -> Iterator[None]:
    """Turn what huggingface_hub raises while reading ``source`` in place into one-line errors:
    :class:`HubNotFoundError` (no such repo or branch) or :class:`HubError` (Hub unreachable)."""
    try:
        yield
    except QkwhError:
        raise
    except FileNotFoundError as error:  # HfFileSystem: the cause says what was not found
        raise (
            _not_found(source, error.__cause__)
            or HubNotFoundError(f"{source}: not found on {endpoint()} ({_reason(error)})")
        ) from error
    except _network_errors() as error:
        found = _not_found(source, error)
        if found is not None:
            raise found from error
        raise HubError(
            f"cannot read {source.spec} from the Hugging Face Hub at {endpoint()} "
            f"({_reason(error)})"
        ) from error


def default_cache_dir() -> Path:
    """The HF hub cache, resolved from the environment now (same precedence as huggingface_hub)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        raw = env["HF_HUB_CACHE"]
    elif env.get("HUGGINGFACE_HUB_CACHE"):
        raw = env["HUGGINGFACE_HUB_CACHE"]
    else:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "huggingface",
        )
        raw = os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(raw)))


def offline() -> bool:
    """Whether Hugging Face offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, read now)."""
    import huggingface_hub.constants as hf_constants

    env = os.environ
    if "HF_HUB_OFFLINE" in env or "TRANSFORMERS_OFFLINE" in env:
        return _truthy(env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE"))
    return bool(hf_constants.HF_HUB_OFFLINE)


def etag_timeout() -> float:
    """Seconds to wait for the Hub's answer about a file (HF_HUB_ETAG_TIMEOUT, default 10)."""
    try:
        value = float(os.environ.get("HF_HUB_ETAG_TIMEOUT", ""))
    except ValueError:
        value = 0.0
    return value if value > 0 else 10.0


def _reason(error: BaseException) -> str:
    """``Type: first line of the message`` of the error that really happened, for one-line messages."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    root = error
    while isinstance(root, LocalEntryNotFoundError) and root.__cause__ is not None:
        root = root.__cause__  # "cannot find it in the cache" wraps the network error
    lines = [line.strip() for line in str(root).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else ""
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(root).__name__}: {text}" if text else type(root).__name__


def _network_errors() -> tuple[type[BaseException], ...]:
    """Transport-level exception bases of whichever HTTP client huggingface_hub uses."""
    types: list[type[BaseException]] = [OSError]  # includes HfHubHTTPError, requests' errors
    for module_name in ("httpx2", "httpx"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        types.append(module.HTTPError)
    return tuple(types)


def _is_partially_cached(cache_dir: Path, source: HubSource) -> bool:
    repo_folder = cache_dir / f"{source.repo_type}s--{source.repo_id.replace('/', '--')}"
    ref = repo_folder / "refs" / source.revision
    try:
        commit = ref.read_text().strip()
    except OSError:
        return False
    snapshot = repo_folder / "snapshots" / commit
    return snapshot.is_dir() and any(snapshot.iterdir())


@functools.cache
def _quiet_tqdm_class() -> type:
    """A huggingface_hub tqdm that never displays (huggingface_hub is imported lazily)."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class QuietTqdm(hf_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return QuietTqdm


def download(
    source: HubSource,
    *,
    cache_dir: Path | None = None,
    allow_patterns: Sequence[str] = DEFAULT_ALLOW_PATTERNS,
    progress: bool = False,
) -> Path:
    """Download (or find in the HF cache) the sniffed files of *source*; return the snapshot folder.

    The folder is ``<cache>/datasets--<owner>--<name>/snapshots/<commit>/`` and holds the files
    matching *allow_patterns* at their repo paths.  Raises :class:`HubNotFoundError` if the repo or
    the branch does not exist or the branch has no ``l??h??{q|k}/data.parquet`` file, and
    :class:`HubError` for every other failure (Hub unreachable and nothing usable cached, transfer
    cut, server error).
    """
    import huggingface_hub
    from huggingface_hub import errors as hf_errors

    url = endpoint()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache = cache.expanduser().resolve()
    is_offline = offline()
    where = f"{source.repo_type} {source.repo_id}"
    incomplete_snapshot = getattr(hf_errors, "IncompleteSnapshotError", None)

    kwargs: dict[str, Any] = dict(
        repo_id=source.repo_id,
        repo_type=source.repo_type,
        revision=source.revision,
        cache_dir=str(cache),
        allow_patterns=list(allow_patterns),
        endpoint=url,
        etag_timeout=etag_timeout(),
        tqdm_class=None if progress else _quiet_tqdm_class(),
    )

    def from_cache_only(cause: BaseException | None) -> Path:
        """The fully cached snapshot, or a one-line HubError explaining why there is none."""
        try:
            return Path(huggingface_hub.snapshot_download(**kwargs, local_files_only=True))
        except Exception as error:  # noqa: BLE001 - every failure here means "not (fully) cached"
            if incomplete_snapshot is not None and isinstance(error, incomplete_snapshot):
                cached = "only part of {} is cached in {}: " + _missing_summary(error)
            elif _is_partially_cached(cache, source):
                cached = "only part of {} is cached in {}"
            else:
                cached = "nothing of {} is cached in {}"
            if cause is None:  # offline mode
                raise HubError(
                    "HF_HUB_OFFLINE is set, so the Hugging Face Hub is not contacted, and "
                    + cached.format(source.spec, cache)
                    + f"; unset HF_HUB_OFFLINE to download it from {url}"
                ) from error
            raise HubError(
                f"cannot reach the Hugging Face Hub at {url} to download {source.spec}, and "
                + cached.format("it", cache)
                + f" ({_reason(cause)})"
            ) from cause

    if is_offline:
        folder = from_cache_only(None)
    else:
        try:
            folder = Path(huggingface_hub.snapshot_download(**kwargs))
        except (hf_errors.RevisionNotFoundError, hf_errors.RepositoryNotFoundError) as error:
            raise _not_found(source, error) from error  # type: ignore[misc]  # not None for these two
        except _network_errors() as error:
            # Covers "Hub unreachable and nothing cached" (LocalEntryNotFoundError), a cached
            # snapshot that is incomplete, a connection cut or server error during the transfer.
            # If the whole branch is cached after all, use it; otherwise explain in one line.
            network_down = isinstance(error, hf_errors.LocalEntryNotFoundError)
            try:
                folder = from_cache_only(error)
            except HubError:
                if network_down:
                    raise
                raise HubError(
                    f"downloading {source.spec} from {url} failed ({_reason(error)}); files already"
                    f" downloaded are kept in {cache}: run the same command again to fetch the rest"
                ) from error
            log.warning("Hub not usable (%s); using the cached snapshot %s", _reason(error), folder)

    if not (folder.is_dir() and sniffed_files(folder)):
        present = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        more = ", ..." if len(present) > 5 else ""
        listing = f" (it has: {', '.join(present[:5])}{more})" if present else ""
        raise HubNotFoundError(
            f"branch {source.revision} of {where} has no l??h??{{q|k}}/data.parquet files at its root"
            f"{listing}; is it a sniffed branch?"
        )
    return folder


def _missing_summary(error: BaseException) -> str:
    match = re.search(r"(\d+) file\(s\) are missing", str(error))
    return f"{match.group(1)} file(s) missing" if match else "some files missing"
