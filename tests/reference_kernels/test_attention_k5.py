"""Attention-family and state-space reference kernels (k5 set) against their PyTorch references.

Every kernel runs under Triton's interpreter on small shapes. Float outputs are compared with
assert_close plus a whole-output norm bound (so an all-zero output cannot pass); copies exactly.
"""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL


def _check(out, ref, dtype, tol=None):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        atol, rtol = tol or TOL[r.dtype if r.dtype in TOL else dtype]
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        finite = r.isfinite()
        assert r.float()[finite].norm() > 0
        err = (o.float() - r.float())[finite].norm()
        assert err <= rtol * r.float()[finite].norm() + atol


def _clone(inputs):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


# name -> (path under triton/, smoke cases, (smallest, largest) tuning values)
KERNELS = {
    "decode_attention_sliding_window": (
        "attention",
        [
            {"batch": 2, "seq_len": 70, "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 40,
             "window": 33, "seq_lens": [70, 20]},
            {"batch": 1, "seq_len": 50, "num_heads_q": 3, "num_heads_kv": 3, "head_dim": 64,
             "window": 1},
            {"batch": 3, "seq_len": 24, "num_heads_q": 2, "num_heads_kv": 1, "head_dim": 16,
             "window": 100, "seq_lens": [24, 0, 7]},
        ],
        [{"block_n": 16, "num_warps": 1}, {"block_n": 128, "num_warps": 8}],
    ),
    "decode_attention_softcap": (
        "attention",
        [
            {"batch": 2, "seq_len": 70, "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 40,
             "softcap": 5.0, "seq_lens": [70, 20]},
            {"batch": 1, "seq_len": 33, "num_heads_q": 8, "num_heads_kv": 1, "head_dim": 64},
            {"batch": 2, "seq_len": 16, "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16,
             "softcap": 1.0, "seq_lens": [0, 16]},
        ],
        [{"block_n": 16, "num_warps": 2}, {"block_n": 128, "num_warps": 8}],
    ),
    "prefill_attention_alibi": (
        "attention",
        [
            {"batch": 1, "heads": 2, "seq_len": 45, "head_dim": 40},
            {"batch": 2, "heads": 4, "seq_len": 16, "head_dim": 64},
            {"batch": 1, "heads": 1, "seq_len": 1, "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 128, "num_warps": 8}],
    ),
    "tree_verify_attention_mask": (
        "attention",
        [
            {"batch": 2, "drafts": 7, "prefix": [37, 0], "num_heads_q": 4, "num_heads_kv": 2,
             "head_dim": 40},
            {"batch": 1, "drafts": 64, "prefix": 5, "num_heads_q": 1, "num_heads_kv": 1,
             "head_dim": 16},
            {"batch": 1, "drafts": 1, "prefix": 20, "num_heads_q": 2, "num_heads_kv": 2,
             "head_dim": 64},
        ],
        [{"block_n": 16, "num_warps": 2}, {"block_n": 128, "num_warps": 8}],
    ),
    "paged_decode_attention_fp8_kv": (
        "attention",
        [
            {"num_seqs": 3, "seq_lens": [37, 16, 5], "num_heads_q": 6, "num_heads_kv": 2,
             "head_dim": 64, "page": 16},
            {"num_seqs": 2, "seq_lens": [40, 0], "num_heads_q": 2, "num_heads_kv": 2,
             "head_dim": 40, "page": 32},
        ],
        [{"num_warps": 2}, {"num_warps": 8}],
    ),
    "mamba_selective_scan_chunked": (
        "other",
        [
            {"batch": 2, "dim": 20, "dstate": 16, "seqlen": 37},
            {"batch": 1, "dim": 8, "dstate": 4, "seqlen": 5},
        ],
        [{"block_d": 4, "block_l": 8, "num_warps": 1},
         {"block_d": 64, "block_l": 64, "num_warps": 8}],
    ),
    "linear_attention_chunked": (
        "other",
        [
            {"batch": 1, "heads": 2, "seqlen": 45, "dk": 32, "dv": 24},
            {"batch": 2, "heads": 1, "seqlen": 16, "dk": 64, "dv": 64},
            {"batch": 1, "heads": 1, "seqlen": 3, "dk": 8, "dv": 16},
        ],
        [{"block_c": 16, "num_warps": 2}, {"block_c": 128, "num_warps": 8}],
    ),
    "retention_decay_chunked": (
        "other",
        [
            {"batch": 1, "heads": 2, "seqlen": 45, "dk": 32, "dv": 40},
            {"batch": 2, "heads": 3, "seqlen": 16, "dk": 16, "dv": 16},
        ],
        [{"block_c": 16, "block_v": 16, "num_warps": 2},
         {"block_c": 128, "block_v": 128, "num_warps": 8}],
    ),
}  # fmt: skip

# outputs rounded twice on the way (bf16 score/state tiles feed the MMA, as on the GPU)
BF16_TOL = {"retention_decay_chunked": (6e-2, 3e-2), "mamba_selective_scan_chunked": (3e-2, 2e-2)}


def _run(load_kernel, name, shape, dtype, **tuning):
    family, _, _ = KERNELS[name]
    mod = load_kernel(f"triton/{family}/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(**_clone(inputs))
    out = getattr(mod, name)(**inputs, **tuning)
    _check(out, ref, dtype, BF16_TOL.get(name) if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("name", "shape"), [(n, s) for n, (_, cases, _) in KERNELS.items() for s in cases], ids=str
)
def test_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, name, which):
    shape = KERNELS[name][1][0]
    _run(load_kernel, name, shape, torch.float32, **KERNELS[name][2][which])


# ------------------------------------------------------------------ kernel-specific behaviour
def test_sliding_window_ignores_keys_before_the_window(load_kernel):
    mod = load_kernel("triton/attention/decode_attention_sliding_window.py")
    inputs = mod.make_inputs({"batch": 1, "seq_len": 40, "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16, "window": 8}, torch.float32)  # fmt: skip
    before = mod.decode_attention_sliding_window(**inputs, block_n=16)
    inputs["k"][:, :32] = 1e4  # outside the window: must not matter
    inputs["v"][:, :32] = float("nan")
    after = mod.decode_attention_sliding_window(**inputs, block_n=16)
    assert torch.equal(before, after)


def test_softcap_bounds_logits(load_kernel):
    # with a tiny cap every logit is ~0, so the output is the mean of the values
    mod = load_kernel("triton/attention/decode_attention_softcap.py")
    inputs = mod.make_inputs({"batch": 1, "seq_len": 20, "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16, "softcap": 1e-4}, torch.float32)  # fmt: skip
    out = mod.decode_attention_softcap(**inputs)
    mean = inputs["v"][0].mean(0).expand(2, 16)
    torch.testing.assert_close(out[0], mean, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_merge_attention_states(load_kernel, dtype):
    mod = load_kernel("triton/attention/merge_attention_states_lse.py")
    inputs = mod.make_inputs({"tokens": 5, "heads": 3, "head_dim": 40}, dtype)
    inputs["prefix_lse"][0, 0] = float("inf")  # an empty split, +inf convention
    inputs["prefix_lse"][1, 1] = inputs["suffix_lse"][1, 1] = float("-inf")  # both empty
    inputs["suffix_lse"] = inputs["suffix_lse"].t().contiguous().t()  # strided lse
    out, lse = mod.merge_attention_states_lse(**inputs)
    _check((out, lse), mod.reference(**inputs), dtype)
    assert torch.equal(out[1, 1], torch.zeros_like(out[1, 1])) and lse[1, 1] == float("-inf")
    torch.testing.assert_close(out[0, 0], inputs["suffix_output"][0, 0])  # prefix weight 0


def test_merge_attention_states_equals_attention_over_union(load_kernel):
    mod = load_kernel("triton/attention/merge_attention_states_lse.py")
    q, k, v = torch.randn(4, 2, 16), torch.randn(4, 30, 2, 16), torch.randn(4, 30, 2, 16)

    def part(lo, hi):
        s = torch.einsum("thd,tnhd->thn", q, k[:, lo:hi])
        return torch.einsum("thn,tnhd->thd", s.softmax(-1), v[:, lo:hi]), s.logsumexp(-1).t()

    (oa, la), (ob, lb) = part(0, 11), part(11, 30)
    out, lse = mod.merge_attention_states_lse(oa, la.contiguous(), ob, lb.contiguous())
    full, full_lse = part(0, 30)
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full_lse, atol=1e-5, rtol=1e-5)


def test_tree_mask_chain_is_causal(load_kernel):
    # a chain tree (each draft sees all earlier drafts) equals causal attention over prefix+drafts
    mod = load_kernel("triton/attention/tree_verify_attention_mask.py")
    inputs = mod.make_inputs({"batch": 1, "drafts": 5, "prefix": 9, "num_heads_q": 1,
                              "num_heads_kv": 1, "head_dim": 16}, torch.float32)  # fmt: skip
    inputs["tree_mask"] = torch.tensor([[(1 << (i + 1)) - 1 for i in range(5)]])
    out = mod.tree_verify_attention_mask(**inputs)
    q, k, v = inputs["q"][0, :, 0], inputs["k_cache"][0, :, 0], inputs["v_cache"][0, :, 0]
    s = (q @ k.t()) * 16**-0.5
    s = s.masked_fill(torch.arange(14)[None, :] > 9 + torch.arange(5)[:, None], float("-inf"))
    atol, rtol = TF32_TOL if ON_GPU else (1e-5, 1e-5)  # fp32 tl.dot is TF32 on the GPU
    torch.testing.assert_close(out[0, :, 0], s.softmax(-1) @ v, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mamba_decode_update_in_place(load_kernel, dtype):
    mod = load_kernel("triton/other/mamba_ssm_decode_update.py")
    for shape in ({"batch": 3, "dim": 40, "dstate": 16}, {"batch": 1, "dim": 7, "dstate": 5}):
        inputs = mod.make_inputs(shape, dtype)
        ref_inputs = _clone(inputs)
        y_ref = mod.reference(**ref_inputs)
        y = mod.mamba_ssm_decode_update(**inputs)
        _check((y, inputs["state"]), (y_ref, ref_inputs["state"]), dtype, (3e-2, 2e-2))
    bare = mod.make_inputs({"batch": 2, "dim": 9, "dstate": 16}, torch.float32)
    bare.update(D=None, z=None, dt_bias=None, dt_softplus=False)
    ref_bare = _clone(bare)
    _check(mod.mamba_ssm_decode_update(**bare, block_d=8, num_warps=1),
           mod.reference(**ref_bare), torch.float32)  # fmt: skip
    _check(bare["state"], ref_bare["state"], torch.float32)


@pytest.mark.parametrize("which", [0, 1])
def test_mamba_decode_update_extreme_tuning(load_kernel, which):
    mod = load_kernel("triton/other/mamba_ssm_decode_update.py")
    inputs = mod.make_inputs({"batch": 2, "dim": 70, "dstate": 16}, torch.float32)
    ref_inputs = _clone(inputs)
    tuning = [{"block_d": 8, "num_warps": 1}, {"block_d": 128, "num_warps": 8}][which]
    _check(mod.mamba_ssm_decode_update(**inputs, **tuning), mod.reference(**ref_inputs),
           torch.float32)  # fmt: skip
    _check(inputs["state"], ref_inputs["state"], torch.float32)


def test_mamba_scan_final_state_continues_with_decode(load_kernel):
    # prefill L tokens then one decode step == prefill L + 1 tokens (no D, no gate)
    scan = load_kernel("triton/other/mamba_selective_scan_chunked.py")
    step = load_kernel("triton/other/mamba_ssm_decode_update.py")
    inputs = scan.make_inputs({"batch": 2, "dim": 12, "dstate": 8, "seqlen": 10}, torch.float32)
    inputs.update(D=None, z=None)
    full, full_state = scan.mamba_selective_scan_chunked(**inputs, block_l=8)
    head = {k: v[..., :9] if k in ("u", "delta", "B", "C") else v for k, v in inputs.items()}
    _, state = scan.mamba_selective_scan_chunked(**head, block_l=8)
    last = {k: inputs[k][..., 9].contiguous() for k in ("u", "delta", "B", "C")}
    y = step.mamba_ssm_decode_update(
        state, last["u"], last["delta"], inputs["A"], last["B"], last["C"],
        dt_bias=inputs["delta_bias"], dt_softplus=True,
    )  # fmt: skip
    torch.testing.assert_close(y, full[..., 9], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, full_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_varlen_pad_unpad_roundtrip(load_kernel, dtype):
    mod = load_kernel("triton/attention/varlen_pad_unpad.py")
    for shape, tuning in (
        ({"lens": [5, 0, 37, 16], "heads": 3, "head_dim": 20, "max_seqlen": 40}, {}),
        ({"lens": [1], "heads": 1, "head_dim": 8}, {"block_s": 4, "num_warps": 1}),
        ({"lens": [9, 33], "heads": 2, "head_dim": 64}, {"block_s": 64, "num_warps": 8}),
    ):
        inputs = mod.make_inputs(shape, dtype)
        padded = mod.varlen_pad(**inputs, **tuning)
        assert torch.equal(padded, mod.reference(**inputs))  # a copy is exact
        total = inputs["x"].shape[0]
        mod.check_inputs(inputs["cu_seqlens"], inputs["max_seqlen"], total, total)
        unpadded = mod.varlen_unpad(padded, inputs["cu_seqlens"], total, **tuning)
        assert torch.equal(unpadded, inputs["x"])
        assert torch.equal(unpadded, mod.reference_unpad(padded, inputs["cu_seqlens"]))


# ------------------------------------------------------------------ input validation
def test_kernels_reject_bad_inputs(load_kernel):
    swa = load_kernel("triton/attention/decode_attention_sliding_window.py")
    inputs = swa.make_inputs({"batch": 1, "seq_len": 8, "num_heads_q": 3, "num_heads_kv": 2,
                              "head_dim": 16, "window": 4}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="HQ % HKV"):
        swa.decode_attention_sliding_window(**inputs)
    cap = load_kernel("triton/attention/decode_attention_softcap.py")
    inputs = cap.make_inputs({"batch": 1, "seq_len": 8, "num_heads_q": 2, "num_heads_kv": 1,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="softcap"):
        cap.decode_attention_softcap(**{**inputs, "softcap": 0.0})
    alibi = load_kernel("triton/attention/prefill_attention_alibi.py")
    inputs = alibi.make_inputs(
        {"batch": 1, "heads": 2, "seq_len": 4, "head_dim": 16}, torch.float32
    )
    with pytest.raises(ValueError, match="alibi_slopes"):
        alibi.prefill_attention_alibi(**{**inputs, "alibi_slopes": torch.ones(3)})
    merge = load_kernel("triton/attention/merge_attention_states_lse.py")
    inputs = merge.make_inputs({"tokens": 2, "heads": 3, "head_dim": 8}, torch.float32)
    with pytest.raises(ValueError, match="prefix_lse"):
        merge.merge_attention_states_lse(**{**inputs, "prefix_lse": inputs["prefix_lse"].t()})
    tree = load_kernel("triton/attention/tree_verify_attention_mask.py")
    inputs = tree.make_inputs({"batch": 1, "drafts": 3, "prefix": 2, "num_heads_q": 1,
                               "num_heads_kv": 1, "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="tree_mask"):
        tree.tree_verify_attention_mask(**{**inputs, "tree_mask": inputs["tree_mask"].int()})
    tree.check_inputs(inputs["q"], inputs["k_cache"], inputs["prefix_lens"])
    with pytest.raises(ValueError, match="exceeds the cache"):  # host read: outside the launcher
        tree.check_inputs(inputs["q"], inputs["k_cache"], inputs["prefix_lens"] + 1)
    fp8 = load_kernel("triton/attention/paged_decode_attention_fp8_kv.py")
    inputs = fp8.make_inputs({"num_seqs": 1, "ctx_len": 5, "num_heads_q": 1, "num_heads_kv": 1,
                              "head_dim": 16, "page": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        fp8.paged_decode_attention_fp8_kv(**{**inputs, "key_cache": inputs["key_cache"].float()})
    fp8.check_inputs(inputs["key_cache"], inputs["block_tables"], inputs["seq_lens"])
    with pytest.raises(ValueError, match="exceeds block_tables"):  # host read: outside the launcher
        too_long = inputs["seq_lens"] + inputs["block_tables"].shape[1] * 16
        fp8.check_inputs(inputs["key_cache"], inputs["block_tables"], too_long)
    scan = load_kernel("triton/other/mamba_selective_scan_chunked.py")
    inputs = scan.make_inputs({"batch": 1, "dim": 4, "dstate": 4, "seqlen": 3}, torch.float32)
    with pytest.raises(ValueError, match="B and C"):
        scan.mamba_selective_scan_chunked(**{**inputs, "C": inputs["C"][:, :2]})
    step = load_kernel("triton/other/mamba_ssm_decode_update.py")
    inputs = step.make_inputs({"batch": 1, "dim": 4, "dstate": 4}, torch.float32)
    with pytest.raises(ValueError, match="dt_bias"):
        step.mamba_ssm_decode_update(**{**inputs, "dt_bias": torch.zeros(5)})
    lin = load_kernel("triton/other/linear_attention_chunked.py")
    inputs = lin.make_inputs({"batch": 1, "heads": 1, "seqlen": 4, "dk": 8, "dv": 8}, torch.float32)
    with pytest.raises(ValueError, match="one dtype"):
        lin.linear_attention_chunked(**{**inputs, "v": inputs["v"].double()})
    ret = load_kernel("triton/other/retention_decay_chunked.py")
    inputs = ret.make_inputs({"batch": 1, "heads": 2, "seqlen": 4, "dk": 8, "dv": 8}, torch.float32)
    ret.check_inputs(inputs["gamma"])
    with pytest.raises(ValueError, match="gamma"):  # host read: outside the launcher
        ret.check_inputs(torch.tensor([0.5, 1.5]))
    o, state = ret.retention_decay_chunked(**{**inputs, "gamma": torch.tensor([0.5, 1.5])})
    assert o[:, 0].isfinite().all() and o[:, 1].isnan().all()  # the bad head is marked NaN
    assert state[:, 0].isfinite().all() and state[:, 1].isnan().all()
    pad = load_kernel("triton/attention/varlen_pad_unpad.py")
    inputs = pad.make_inputs({"lens": [3, 4], "heads": 1, "head_dim": 8}, torch.float32)
    with pytest.raises(ValueError, match="max_seqlen"):  # host read: outside the launcher
        pad.check_inputs(inputs["cu_seqlens"], 3, 7)
    with pytest.raises(ValueError, match="TOTAL"):
        pad.check_inputs(inputs["cu_seqlens"], 4, 6)
    with pytest.raises(ValueError, match="total_tokens"):
        pad.check_inputs(inputs["cu_seqlens"], 4, 7, 6)
    with pytest.raises(ValueError, match="max_seqlen"):
        pad.varlen_pad(**{**inputs, "max_seqlen": -1})
    # a too-short max_seqlen cuts the longer sequence in the kernel (no host read, no overrun)
    cut = pad.varlen_pad(**{**inputs, "max_seqlen": 3})
    assert torch.equal(cut, pad.reference(**{**inputs, "max_seqlen": 4})[:, :3])
    with pytest.raises(ValueError, match="cu_seqlens"):
        pad.varlen_unpad(torch.zeros(2, 4, 1, 8), inputs["cu_seqlens"].long(), 7)
