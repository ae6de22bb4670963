"""qkwh.sniffed.hub against a local stand-in for the Hugging Face Hub (tests/sniffed/hub_server.py).

Nothing here talks to the internet: the stand-in binds 127.0.0.1 and every download gets
``HF_ENDPOINT`` pointed at it (or at a closed local port).

huggingface_hub reads some settings once, when it is first imported.  One of them matters here:
unless ``HF_HUB_DISABLE_TELEMETRY`` is set, building request headers fetches an "agent harness"
registry from huggingface.co once per process.  ``tests/conftest.py`` sets it before anything
imports huggingface_hub; this module asserts that it took effect.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest

# conftest.py disables telemetry before the first import: no request may leave this machine
assert hf_constants.HF_HUB_DISABLE_TELEMETRY, "huggingface_hub was imported with telemetry on"

# tests/ has no __init__.py: pytest's default 'prepend' import mode puts tests/sniffed on sys.path.
from hub_server import HubStandIn

from qkwh.errors import InputError, NotFoundError, QkwhError
from qkwh.sniffed.hub import (
    DEFAULT_ALLOW_PATTERNS,
    HubError,
    HubNotFoundError,
    HubSource,
    HubSourceError,
    download,
    parse_hub_source,
)

REPO = "viktoroo/sniffed-qk"
SAMPLE = Path(__file__).resolve().parents[2] / "warehouse" / "sample" / "smollm2-135m"
# Two query heads of SmolLM2 (GQA group 3: key head = query head // 3) with their key heads.
SAMPLE_FILES = [
    "l02h00q/data.parquet",
    "l02h00k/data.parquet",
    "l07h01q/data.parquet",
    "l07h00k/data.parquet",
    "_saver_state.json",
    "README.md",
]
NOT_WANTED = {
    ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
    "notes/extra.txt": b"not sniffed\n",
}
BRANCH = "smollm2-135m-longbench-pro-128k-plus"
LARGE_BRANCH = "smollm2-135m-large"
BIG = "l00h00q/data.parquet"  # synthetic, larger than 1.5 download chunks (see large_parquet)
CHUNK = getattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 10 * 1024 * 1024)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def branch_files(tmp_path_factory) -> dict[str, bytes]:
    """A small sniffed branch: real sample files copied to a tmp dir, read back as bytes."""
    root = tmp_path_factory.mktemp("branch")
    for rel in SAMPLE_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / rel, root / rel)
    return {rel: (root / rel).read_bytes() for rel in SAMPLE_FILES}


@pytest.fixture(scope="module")
def large_parquet() -> bytes:
    """A synthetic sniffed-format parquet file of ~1.5 download chunks (random vectors, d=64).

    huggingface_hub 2.4.0 streams a file with ``iter_bytes(chunk_size=DOWNLOAD_CHUNK_SIZE)`` (10 MiB)
    and only writes whole chunks to disk before an interruption, so only a file larger than one
    chunk can show a resumed (``Range``) transfer.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = 64
    rows = int(1.5 * CHUNK) // (d * 4) + 1
    rng = np.random.default_rng(0)
    position = np.sort(rng.integers(0, 8192, rows)).astype(np.int32)
    table = pa.table(
        {
            "bucket": pa.array(position // 512, pa.int32()),
            "example_id": pa.array(np.zeros(rows, np.int32)),
            "position": pa.array(position),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * d, np.float32)), d
            ),
            "sliding_window": pa.nulls(rows, pa.int32()),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none")
    data = sink.getvalue().to_pybytes()
    assert len(data) > 1.4 * CHUNK
    return data


@pytest.fixture
def hub(branch_files, large_parquet):
    branches = {
        BRANCH: {**branch_files, **NOT_WANTED},
        LARGE_BRANCH: {**branch_files, BIG: large_parquet, **NOT_WANTED},
        "readme-only": {
            "README.md": b"# not a sniffed branch\n",
            ".gitattributes": NOT_WANTED[".gitattributes"],
        },
    }
    with HubStandIn(REPO, branches) as server:
        yield server


@pytest.fixture
def hub_env(hub, tmp_path, monkeypatch) -> Path:
    """Environment of a user whose HF endpoint is the stand-in; returns the HF hub cache dir."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "5")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return cache


def closed_port_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------------------------------------ 1. download


def test_download_gives_exactly_the_served_sniffed_files(hub, hub_env, branch_files):
    source = parse_hub_source(f"hf://datasets/{REPO}@{BRANCH}")
    folder = download(source)

    assert folder == hub_env / "datasets--viktoroo--sniffed-qk" / "snapshots" / hub.commit(BRANCH)
    assert (
        files_under(folder) == branch_files
    )  # same names, same bytes; .gitattributes/notes skipped
    assert not [r for r in hub.requests if r.filename in NOT_WANTED]

    hub.clear_log()  # a second call only asks which commit the branch is at
    assert download(source) == folder
    assert [r.method for r in hub.requests if r.filename] == []


def test_download_into_an_explicit_cache_dir(hub, hub_env, tmp_path, branch_files):
    folder = download(HubSource(REPO, BRANCH), cache_dir=tmp_path / "elsewhere")
    assert folder.is_relative_to(tmp_path / "elsewhere")
    assert files_under(folder) == branch_files
    assert not hub_env.exists()


# ------------------------------------------------------------------------------------------ 2. resume


def test_interrupted_transfer_is_resumed_with_a_range_request(hub, hub_env, large_parquet):
    """huggingface_hub 2.4.0 resumes a cut transfer inside the same call (``http_get``).

    When the body stream breaks (``RemoteProtocolError``: fewer bytes than ``Content-Length``),
    ``http_get`` waits 1 s and asks again with ``Range: bytes=<bytes on disk>-``.  Bytes are written
    in 10 MiB chunks, so after a cut at 12 MiB the retry starts at 10 MiB.  The call succeeds.
    """
    cut_at = CHUNK + CHUNK // 5
    hub.cut_next(BIG, after=cut_at)

    folder = download(HubSource(REPO, LARGE_BRANCH))

    first, retry = hub.file_gets(BIG)
    assert (first.range, first.cut, first.bytes_sent) == (None, True, cut_at)
    assert retry.range is not None and retry.range.startswith("bytes=")
    start = int(retry.range.removeprefix("bytes=").split("-")[0])
    assert 0 < start <= cut_at, "the retry must continue where the data on disk ends, not restart"
    assert (retry.status, retry.cut) == (206, False)
    assert (folder / BIG).read_bytes() == large_parquet


def test_failed_download_keeps_finished_files_and_a_rerun_fetches_the_rest(
    hub, hub_env, monkeypatch, large_parquet, branch_files
):
    """What a *second call* resumes with huggingface_hub 2.4.0: whole files, not partial ones.

    Each transfer goes to a process-unique ``<etag>.<uuid>.incomplete`` file that is deleted when the
    call fails (``_download_to_tmp_and_move``, huggingface_hub PR #4228), so an ``.incomplete`` file is
    never reused across calls.  What survives a failed call is every file it completed; the next call
    downloads only the missing files, each from byte 0 (no ``Range`` request).
    """
    source = HubSource(REPO, LARGE_BRANCH)
    hub.cut_next(BIG, after=CHUNK + CHUNK // 5)  # transfer breaks ...
    hub.fail_next(BIG, status=503)  # ... and the in-call resume attempt gets a server error

    with pytest.raises(HubError) as failed:
        download(source)
    message = one_line(failed.value)
    assert (
        f"{REPO}@{LARGE_BRANCH}" in message
        and "503" in message
        and "run the same command again" in message
    )
    first, resume_attempt = hub.file_gets(BIG)
    assert first.cut and resume_attempt.range and resume_attempt.status == 503
    assert not list(hub_env.rglob("*.incomplete")), "huggingface_hub 2.4.0 deletes the partial file"

    # The finished files are cached, the big one is not: offline, that is "part of it is cached".
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"only part of .* is cached .*1 file\(s\) missing"):
        download(source)
    monkeypatch.delenv("HF_HUB_OFFLINE")

    hub.clear_log()
    folder = download(source)

    assert {r.filename for r in hub.requests if r.method == "GET" and r.filename} == {BIG}
    (rerun,) = hub.file_gets(BIG)
    assert (rerun.range, rerun.status, rerun.cut) == (None, 200, False), (
        "2.4.0 restarts the file from byte 0"
    )
    assert files_under(folder) == {**branch_files, BIG: large_parquet}


# ------------------------------------------------------------------------------------------ 3. offline


def test_cached_branch_is_used_when_the_hub_is_down(hub, hub_env, monkeypatch, branch_files):
    source = HubSource(REPO, BRANCH)
    folder = download(source)
    hub.stop()

    assert download(source) == folder  # connection refused -> the cached snapshot

    monkeypatch.setenv("HF_ENDPOINT", closed_port_endpoint())
    assert download(source) == folder
    assert files_under(folder) == branch_files


def test_hf_hub_offline_uses_the_cache_without_any_request(hub, hub_env, monkeypatch):
    source = HubSource(REPO, BRANCH)
    folder = download(source)
    hub.clear_log()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert download(source) == folder
    assert hub.requests == []


# ------------------------------------------------------------------------------------------ 4. errors


def test_unreachable_hub_and_nothing_cached(hub_env, monkeypatch):
    endpoint = closed_port_endpoint()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)

    with pytest.raises(HubError) as info:
        download(HubSource(REPO, BRANCH))

    message = one_line(info.value)
    assert message.startswith(
        f"cannot reach the Hugging Face Hub at {endpoint} to download {REPO}@{BRANCH},"
        f" and nothing of it is cached in {hub_env}"
    ), message
    assert isinstance(info.value, QkwhError) and not isinstance(info.value, NotFoundError)


def test_offline_mode_and_nothing_cached(hub, hub_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as info:
        download(HubSource(REPO, BRANCH))
    message = one_line(info.value)
    assert (
        "HF_HUB_OFFLINE" in message
        and f"nothing of {REPO}@{BRANCH} is cached in {hub_env}" in message
    )
    assert hub.requests == []


def test_unknown_branch(hub, hub_env):
    with pytest.raises(HubNotFoundError) as info:
        download(HubSource(REPO, "no-such-model-longbench-pro-128k-plus"))
    message = one_line(info.value)
    assert message.startswith(
        f"no branch no-such-model-longbench-pro-128k-plus in dataset {REPO}"
    ), message
    assert isinstance(info.value, NotFoundError) and info.value.exit_code == NotFoundError.exit_code


def test_unknown_repo(hub, hub_env):
    with pytest.raises(HubNotFoundError) as info:
        download(HubSource("viktoroo/no-such-repo", BRANCH))
    assert one_line(info.value).startswith(f"no dataset viktoroo/no-such-repo on {hub.endpoint}")


def test_branch_without_sniffed_files(hub, hub_env):
    with pytest.raises(HubNotFoundError) as info:
        download(HubSource(REPO, "readme-only"))
    message = one_line(info.value)
    assert (
        "branch readme-only of dataset viktoroo/sniffed-qk has no l??h??{q|k}/data.parquet"
        in message
    )
    assert "README.md" in message


# ------------------------------------------------------------------------------------------ 6. parsing


@pytest.mark.parametrize(
    ("text", "repo_id", "revision", "model_id"),
    [
        (
            f"hf://datasets/{REPO}@qwen3-0.6b-longbench-pro-128k-plus",
            REPO,
            "qwen3-0.6b-longbench-pro-128k-plus",
            "qwen3-0.6b",
        ),
        (
            f"hf://datasets/{REPO}@smollm3-3b-stage1-step-40000-longbench-pro-128k-plus",
            REPO,
            "smollm3-3b-stage1-step-40000-longbench-pro-128k-plus",
            "smollm3-3b-stage1-step-40000",
        ),
        (f"hf://datasets/{REPO}", REPO, "main", "main"),
        (f"hf://datasets/{REPO}/", REPO, "main", "main"),
        (f"  hf://datasets/{REPO}@my-branch  ", REPO, "my-branch", "my-branch"),
        ("hf://datasets/some_org/my.data-set@v1.0", "some_org/my.data-set", "v1.0", "v1.0"),
        ("hf://datasets/a/b@refs%2Fpr%2F3", "a/b", "refs/pr/3", "refs/pr/3"),
        ("hf://datasets/a/b@feature/x", "a/b", "feature/x", "feature/x"),
    ],
)
def test_parse_hub_source(text, repo_id, revision, model_id):
    source = parse_hub_source(text)
    assert source == HubSource(repo_id=repo_id, revision=revision)
    assert source.repo_type == "dataset"
    assert source.model_id_guess == model_id
    assert str(source) == f"hf://datasets/{repo_id}@{revision}"


@pytest.mark.parametrize(
    "text",
    [
        "warehouse/sample/smollm2-135m",
        "/data/sniffed",
        "./hf:",
        "",
        "https://huggingface.co/datasets/a/b",
    ],
)
def test_parse_hub_source_ignores_local_paths(text):
    assert parse_hub_source(text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("hf://", "no repo given"),
        ("hf://datasets", "<owner>/<name>"),
        ("hf://datasets/viktoroo", "<owner>/<name>"),
        (f"hf://datasets/{REPO}@", "empty branch"),
        (f"hf://datasets/{REPO}/l00h00q/data.parquet", "paths inside the repo"),
        (f"hf://{REPO}@main", "must start with 'datasets/'"),
        ("hf://models/HuggingFaceTB/SmolLM2-135M", "only dataset repos"),
        (f"hf://datasets/{REPO}@a@b", "more than one '@'"),
        (f"hf://datasets/{REPO}@bad..name", "not a valid branch name"),
        (f"hf://datasets/{REPO}@has space", "not a valid branch name"),
        ("hf://datasets/bad--owner/x", "not a valid owner or repo name"),
        ("hf://datasets/owner/na:me", "not a valid owner or repo name"),
    ],
)
def test_parse_hub_source_rejects_malformed(text, reason):
    with pytest.raises(ValueError) as info:  # noqa: PT011 (the message is checked below)
        parse_hub_source(text)
    message = str(info.value)
    assert repr(text) in message and reason in message
    assert "expected hf://datasets/<owner>/<name>[@<branch>]" in message
    assert isinstance(info.value, HubSourceError) and isinstance(info.value, InputError)


def test_default_allow_patterns():
    assert DEFAULT_ALLOW_PATTERNS == ("l*h*[qk]/data.parquet", "_saver_state.json", "README.md")
