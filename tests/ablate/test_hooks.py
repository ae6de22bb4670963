"""The ablation acts on the right slice: tiny random Llama (GQA 4:2) and Qwen2 (6:2) models."""

from __future__ import annotations

import pytest
from ablate_helpers import SHAPES, build_model, need_capture_extra

need_capture_extra()

import torch  # noqa: E402

from qkwh.ablate import passkey  # noqa: E402
from qkwh.ablate.hooks import MeanRecorder, ablated, output_projections  # noqa: E402
from qkwh.ablate.run import score_prompt  # noqa: E402

KINDS = ("llama", "qwen2")
TOL = dict(rtol=1e-5, atol=1e-5)  # float32 forwards through different code paths


def _ids(seed: int = 0, n: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 90, (1, n), generator=g)


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("kind", KINDS)
def test_none_is_the_plain_model_and_hooks_go_away(kind):
    model, _ = build_model(kind)
    ids = _ids()
    plain = _logits(model, ids)
    with ablated(model, [], head_dim=SHAPES[kind][3]):
        same = _logits(model, ids)
    assert torch.equal(plain, same)
    with ablated(model, [(1, 1)], head_dim=SHAPES[kind][3]):
        changed = _logits(model, ids)
    assert not torch.allclose(plain, changed, **TOL)  # the ablation does something
    assert torch.equal(_logits(model, ids), plain)  # and leaves nothing behind


@pytest.mark.parametrize("kind", KINDS)
def test_zero_ablating_a_head_equals_zeroing_its_slice_by_hand(kind):
    """Zeroing head h's input columns of o_proj is the same as zeroing o_proj's weight columns
    of that head (what the heads mix into the residual stream)."""
    model, _ = build_model(kind)
    _, n_q, _, d = SHAPES[kind]
    ids = _ids(1)
    for layer, h in [(0, 0), (1, n_q - 1), (1, 1)]:
        with ablated(model, [(layer, h)], head_dim=d):
            hooked = _logits(model, ids)
        proj = output_projections(model)[layer]
        saved = proj.weight.detach().clone()
        with torch.no_grad():
            proj.weight[:, h * d : (h + 1) * d] = 0
        by_hand = _logits(model, ids)
        with torch.no_grad():
            proj.weight.copy_(saved)
        torch.testing.assert_close(hooked, by_hand, **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_gqa_other_query_heads_of_the_shared_kv_head_are_untouched(kind):
    """Under GQA a query head is ablated alone: the o_proj input slices of the other query
    heads (including those sharing its key/value head) are what the plain model computes."""
    model, _ = build_model(kind)
    _, n_q, n_kv, d = SHAPES[kind]
    ids = _ids(2)
    seen = {}

    def grab(name):
        def hook(module, args):
            seen[name] = args[0].detach().clone()

        return hook

    proj = output_projections(model)[0]
    handle = proj.register_forward_pre_hook(grab("plain"))
    _logits(model, ids)
    handle.remove()
    with ablated(model, [(0, 1)], head_dim=d):
        # registered after the ablation's hook, so it sees the ablated input
        handle = proj.register_forward_pre_hook(grab("ablated"))
        _logits(model, ids)
        handle.remove()
    plain = seen["plain"].view(1, -1, n_q, d)
    abl = seen["ablated"].view(1, -1, n_q, d)
    assert torch.count_nonzero(abl[:, :, 1]) == 0
    assert torch.equal(
        torch.cat([abl[:, :, :1], abl[:, :, 2:]], 2),
        torch.cat([plain[:, :, :1], plain[:, :, 2:]], 2),
    )
    assert n_q // n_kv > 1 and 0 // (n_q // n_kv) == 1 // (n_q // n_kv)  # head 0 shares its kv


@pytest.mark.parametrize("kind", KINDS)
def test_ablating_every_head_of_a_layer_removes_its_attention(kind):
    """Every head of layer l zeroed = layer l's attention block outputs nothing."""
    model, _ = build_model(kind)
    layers, n_q, _, d = SHAPES[kind]
    ids = _ids(3)
    layer = layers - 1
    with ablated(model, [(layer, h) for h in range(n_q)], head_dim=d):
        hooked = _logits(model, ids)
    attn = model.model.layers[layer].self_attn
    handle = attn.register_forward_hook(lambda m, a, out: (torch.zeros_like(out[0]), *out[1:]))
    removed = _logits(model, ids)
    handle.remove()
    torch.testing.assert_close(hooked, removed, **TOL)
    assert not torch.allclose(removed, _logits(model, ids), **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_mean_ablation_puts_the_recorded_mean_slice(kind):
    model, _ = build_model(kind)
    _, n_q, _, d = SHAPES[kind]
    prompts = [_ids(s, 30 + 5 * s) for s in range(3)]
    rec = MeanRecorder(model, d)
    slices = []
    proj = output_projections(model)[1]
    h = proj.register_forward_pre_hook(lambda m, a: slices.append(a[0][0].double()))
    for ids in prompts:
        with rec.recording():
            _logits(model, ids)
    h.remove()
    want = torch.cat(slices).mean(0).view(n_q, d).float()
    means = rec.means()
    torch.testing.assert_close(means[1], want, rtol=1e-6, atol=1e-6)
    # the mean-ablated forward equals zeroing the head and adding W_h @ mean by hand
    ids = prompts[0]
    with ablated(model, [(1, 2)], head_dim=d, means=means):
        hooked = _logits(model, ids)

    def by_hand(module, args):
        x = args[0].clone().view(*args[0].shape[:-1], n_q, d)
        x[..., 2, :] = means[1][2]
        return (x.view(args[0].shape),)

    h = proj.register_forward_pre_hook(by_hand)
    want_logits = _logits(model, ids)
    h.remove()
    torch.testing.assert_close(hooked, want_logits, **TOL)


def test_score_prompt_logprob_and_greedy_match():
    """logprob = sum of the key tokens' log-softmax from a full forward; correct iff greedy
    generation reproduces the key (planted: the answer made of the model's own greedy tokens)."""
    model, tok = build_model("llama")
    p = passkey.make_prompt(tok, 260, 0.5, 0)
    n_ans = p.length - p.answer_start
    ids = torch.tensor([p.input_ids])
    full = _logits(model, ids)[0].double().log_softmax(-1)
    want = sum(float(full[i - 1, p.input_ids[i]]) for i in range(p.answer_start, p.length))
    lp, ok = score_prompt(model, p)
    assert lp == pytest.approx(want, rel=1e-6)
    prompt_ids = ids[:, : p.answer_start]
    with torch.inference_mode():
        greedy = model.generate(
            prompt_ids,
            max_new_tokens=n_ans,
            do_sample=False,
            pad_token_id=2,
            attention_mask=torch.ones_like(prompt_ids),
        )[0, p.answer_start :]
    assert ok == bool(torch.equal(greedy, ids[0, p.answer_start :]))
    planted = passkey.Prompt(
        p.length,
        p.depth,
        p.trial,
        p.passkey,
        tuple(prompt_ids[0].tolist()) + tuple(greedy.tolist()),
        p.answer_start,
        p.key_position,
        p.prompt,
    )
    assert score_prompt(model, planted)[1] is True
    wrong = list(planted.input_ids)
    wrong[-1] = (wrong[-1] + 1) % 90 + 3
    bad = passkey.Prompt(
        p.length,
        p.depth,
        p.trial,
        p.passkey,
        tuple(wrong),
        p.answer_start,
        p.key_position,
        p.prompt,
    )
    assert score_prompt(model, bad)[1] is False
