"""The passkey prompts: exact length, the key where asked, deterministic, shipped filler."""

from __future__ import annotations

import pytest
from ablate_helpers import make_tokenizer, need_capture_extra

need_capture_extra()

from qkwh.ablate import passkey  # noqa: E402
from qkwh.errors import InputError  # noqa: E402


def test_prompts_have_the_length_the_key_and_the_answer_at_the_end():
    tok, _ = make_tokenizer()
    for length in (240, 400):
        for depth in (0.0, 0.5, 1.0):
            p = passkey.make_prompt(tok, length, depth, 3, seed=7)
            assert len(p.input_ids) == length
            assert len(p.passkey) == 5 and p.passkey.isdigit()
            answer = tok.decode(list(p.input_ids[p.answer_start :]))
            assert answer == " " + p.passkey
            # the key sentence starts at key_position, at the requested depth of the filler
            needle = tok.decode(list(p.input_ids[p.key_position : p.key_position + 30]))
            assert needle.startswith(" The pass key is " + p.passkey)
            assert p.prompt.endswith("The pass key is")
            assert p.input_ids[0] == tok.bos_token_id
    a = passkey.make_prompt(tok, 300, 0.25, 1, seed=0)
    assert passkey.make_prompt(tok, 300, 0.25, 1, seed=0) == a
    assert passkey.make_prompt(tok, 300, 0.25, 2, seed=0).passkey != a.passkey or (
        passkey.make_prompt(tok, 300, 0.25, 2, seed=0).input_ids != a.input_ids
    )


def test_depth_moves_the_key():
    tok, _ = make_tokenizer()
    pos = [passkey.make_prompt(tok, 500, d, 0).key_position for d in (0.1, 0.5, 0.9)]
    assert pos[0] < pos[1] < pos[2]


def test_too_short_a_length_is_refused():
    tok, _ = make_tokenizer()
    with pytest.raises(InputError, match="cannot hold the passkey task"):
        passkey.make_prompt(tok, 50, 0.5, 0)


def test_filler_ships_with_the_package():
    assert passkey.FILLER.is_file()
    assert len(passkey.filler_text().split()) > 500
