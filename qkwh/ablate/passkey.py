"""The ``passkey`` task: a 5-digit key hidden at a given depth of filler text, asked for at the end.

Every prompt is a deterministic function of (seed, length, depth, trial) and the tokenizer:
the filler is the text shipped with qkwh (``filler.txt``, written for qkwh, repeated as often as
needed), the key and the filler's starting offset are drawn from a numpy generator seeded with
those four numbers.  The pieces are tokenised separately and concatenated, so the prompt has
exactly ``length`` tokens, answer included:

    [BOS] intro | filler[:a] | needle | filler[a:b] | question | key tokens

``answer_start`` is the index of the first key token.  The same prompts serve every selection
of a run, so the differences between selections are paired.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qkwh.errors import InputError

TASK = "passkey"
FILLER = Path(__file__).with_name("filler.txt")
INTRO = (
    "There is a pass key hidden inside the following text. Read the text, find the pass key "
    "and remember it.\n\n"
)
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "\n\nWhat is the pass key? The pass key is"
ANSWER = " {key}"
#: fewest filler tokens a prompt must have (else the length is too short for the task)
MIN_FILLER = 16


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``input_ids`` has ``length`` tokens, the key's from ``answer_start`` on."""

    length: int
    depth: float
    trial: int
    passkey: str
    input_ids: tuple[int, ...]
    answer_start: int
    key_position: int
    prompt: str


@functools.lru_cache(maxsize=1)
def filler_text() -> str:
    """The shipped filler text (one sentence per line)."""
    return FILLER.read_text(encoding="utf-8")


def _ids(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def bos_prefix(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer puts it in front of a text by default, else []."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    default = tokenizer("x")["input_ids"]
    return [int(bos)] if list(default[:1]) == [bos] else []


def _rng(seed: int, length: int, depth: float, trial: int) -> np.random.Generator:
    return np.random.default_rng([seed, length, int(round(depth * 1_000_000)), trial])


def make_prompt(tokenizer: Any, length: int, depth: float, trial: int, *, seed: int = 0) -> Prompt:
    """The prompt of (length, depth, trial); InputError when ``length`` cannot hold the task."""
    if not 0.0 <= depth <= 1.0:
        raise InputError(f"--depths: {depth} is not between 0 and 1")
    rng = _rng(seed, length, depth, trial)
    key = str(int(rng.integers(10_000, 100_000)))
    head = bos_prefix(tokenizer) + _ids(tokenizer, INTRO)
    needle = _ids(tokenizer, NEEDLE.format(key=key))
    question = _ids(tokenizer, QUESTION)
    answer = _ids(tokenizer, ANSWER.format(key=key))
    n_filler = length - len(head) - len(needle) - len(question) - len(answer)
    if n_filler < MIN_FILLER:
        raise InputError(
            f"--lengths: {length} tokens cannot hold the passkey task (it needs at least "
            f"{length - n_filler + MIN_FILLER} tokens with this tokenizer)"
        )
    base = filler_ids(tokenizer)
    start = int(rng.integers(0, len(base)))
    reps = (start + n_filler) // len(base) + 1
    filler = (base * reps)[start : start + n_filler]
    cut = int(round(depth * n_filler))
    prompt_ids = head + filler[:cut] + needle + filler[cut:] + question
    ids = prompt_ids + answer
    assert len(ids) == length
    return Prompt(
        length=length,
        depth=float(depth),
        trial=trial,
        passkey=key,
        input_ids=tuple(ids),
        answer_start=len(prompt_ids),
        key_position=len(head) + cut,
        prompt=tokenizer.decode(prompt_ids),
    )


_FILLER_CACHE: dict[int, list[int]] = {}


def filler_ids(tokenizer: Any) -> list[int]:
    """The filler text tokenised (cached per tokenizer object)."""
    key = id(tokenizer)
    if key not in _FILLER_CACHE:
        _FILLER_CACHE[key] = _ids(tokenizer, filler_text())
    return _FILLER_CACHE[key]


def prompts(
    tokenizer: Any,
    lengths: tuple[int, ...],
    depths: tuple[float, ...],
    trials: int,
    *,
    seed: int = 0,
) -> list[Prompt]:
    """Every prompt of a run, by length, then depth, then trial."""
    return [
        make_prompt(tokenizer, n, d, t, seed=seed)
        for n in lengths
        for d in depths
        for t in range(trials)
    ]
