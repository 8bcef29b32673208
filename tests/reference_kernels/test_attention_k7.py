"""Attention reference kernels (k7 set) against their own PyTorch references, in the interpreter.

Float outputs are compared with assert_close plus a whole-output norm bound (so an all-zero output
cannot pass). Shapes are tiny: CI runs these under Triton's CPU interpreter on two cores.
"""

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL
FP32 = TOL[torch.float32]

UA = {"num_heads_q": 4, "num_heads_kv": 2, "head_dim": 24}
# name -> (smoke cases, (smallest, largest) tuning values)
KERNELS = {
    "unified_attention_diag_split_loop": (
        [
            {"seq_lens": [5, 40], "context_lens": [3, 9], **UA},
            {"seq_lens": [1, 17], "num_heads_q": 3, "num_heads_kv": 1, "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 64, "num_warps": 8}],
    ),
    "unified_attention_persistent_work_list": (
        [
            {"seq_lens": [5, 0, 40], "context_lens": [3, 4, 9], **UA},
            {"seq_lens": [17], "num_heads_q": 3, "num_heads_kv": 1, "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "programs_per_sm": 1, "num_warps": 2},
         {"block_m": 64, "block_n": 64, "programs_per_sm": 4, "num_warps": 8}],
    ),
    "attention_forward_diag_split_varlen": (
        [
            {"seq_lens": [7, 33, 20], "num_heads_q": 2, "head_dim": 24},
            {"seq_lens": [7, 33], "k_lens": [20, 33], "causal": True, **UA},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 64, "num_warps": 8}],
    ),
    "paged_decode_attention_multi_query": (
        [
            {"seq_lens": [37, 4], "num_queries": 4, **UA},
            {"seq_lens": [20], "num_queries": 1, "num_heads_q": 2, "num_heads_kv": 2,
             "head_dim": 16, "page": 32},
        ],
        [{"block_n": 16, "num_warps": 2}, {"block_n": 64, "num_warps": 8}],
    ),
    "flash_decoding_dense_split_kv": (
        [
            {"batch": 3, "seq_len": 24, "seq_lens": [24, 0, 9], **UA},
            {"batch": 1, "seq_len": 33, "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16},
        ],
        [{"num_splits": 2, "block_n": 16, "num_warps": 2},
         {"num_splits": 16, "block_n": 64, "num_warps": 8}],
    ),
    "sliding_window_prefill_block_skip": (
        [
            {"batch": 1, "num_heads_q": 2, "num_heads_kv": 1, "seq_len": 70, "head_dim": 24,
             "window": 20},
            {"batch": 2, "num_heads_q": 1, "num_heads_kv": 1, "seq_len": 20, "head_dim": 16,
             "window": 1},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 64, "num_warps": 8}],
    ),
    "cross_attention_non_causal": (
        [
            {"batch": 2, "len_q": 20, "len_k": 70, "kv_lens": [70, 0], "num_heads_q": 2,
             "num_heads_kv": 1, "head_dim": 24},
            {"batch": 1, "len_q": 3, "len_k": 17, "num_heads_q": 2, "num_heads_kv": 2,
             "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 128, "num_warps": 8}],
    ),
    "attention_with_lse_output": (
        [
            {"seq_lens": [5, 40], **UA},
            {"seq_lens": [1, 17], "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 64, "num_warps": 8}],
    ),
    "prefix_cached_prefill_two_source": (
        [
            {"new_lens": [5, 20], "prefix_lens": [37, 0], **UA},
            {"new_lens": [17], "prefix_lens": [16], "num_heads_q": 3, "num_heads_kv": 1,
             "head_dim": 16},
        ],
        [{"block_m": 16, "block_n": 16, "num_warps": 2},
         {"block_m": 128, "block_n": 64, "num_warps": 8}],
    ),
    "mla_decode_attention_latent_tiled": (
        [
            {"seq_lens": [37, 5, 0], "num_heads": 5, "kv_lora_rank": 48, "rope_dim": 16},
            {"seq_lens": [20], "num_heads": 17, "kv_lora_rank": 32, "rope_dim": 8},
        ],
        [{"block_h": 16, "block_r": 16, "block_n": 16, "block_dk": 16, "num_warps": 2},
         {"block_h": 64, "block_r": 256, "block_n": 64, "block_dk": 128, "num_warps": 8}],
    ),
    "paged_decode_attention_block_outer": (
        [
            {"seq_lens": [37, 16, 0], "num_heads_q": 6, "num_heads_kv": 2, "head_dim": 32},
            {"seq_lens": [40], "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 24, "page": 32},
        ],
        [{"num_warps": 2, "num_stages": 1}, {"num_warps": 8, "num_stages": 3}],
    ),
}  # fmt: skip

BF16_ONLY = {"paged_decode_attention_block_outer"}  # 16-bit split-x cache layout only


def _check(out, ref):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        atol, rtol = TOL[r.dtype]  # an fp32 lse beside a bf16 output is exact-input fp32 math
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert r.float().norm() > 0
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = load_kernel(f"triton/attention/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(**inputs)
    out = getattr(mod, name)(**inputs, **tuning)
    _check(out, ref)
    return mod, inputs, out


CASES = [
    (n, s, dt)
    for n, (cases, _) in KERNELS.items()
    for s in cases
    for dt in ([torch.bfloat16] if n in BF16_ONLY else DTYPES)
]


@pytest.mark.parametrize(("name", "shape", "dtype"), CASES, ids=str)
def test_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, name, which):
    dtype = torch.bfloat16 if name in BF16_ONLY else torch.float32
    _run(load_kernel, name, KERNELS[name][0][0], dtype, **KERNELS[name][1][which])


# ------------------------------------------------------------------ kernel-specific behaviour
def test_block_outer_runs_fp16_on_the_split_x_layout(load_kernel):
    mod = load_kernel("triton/attention/paged_decode_attention_block_outer.py")
    shape = {"seq_lens": [33, 16], "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 16}
    _run(load_kernel, "paged_decode_attention_block_outer", shape, torch.float16)
    inputs = mod.make_inputs(shape, torch.float16)
    # the split-x key layout: element d of a key lives at [.., d // 8, slot, d % 8]
    k = inputs["k_cache"]
    assert k.shape[2] * k.shape[4] == 16 and k.shape[4] == 8


def test_lse_is_the_logsumexp_of_the_scaled_scores(load_kernel):
    mod = load_kernel("triton/attention/attention_with_lse_output.py")
    inputs = mod.make_inputs({"seq_lens": [24], "num_heads_q": 2, "num_heads_kv": 2,
                              "head_dim": 16}, torch.float32)  # fmt: skip
    out, lse = mod.attention_with_lse_output(**inputs, block_m=16, block_n=16)
    # the last row's lse equals logsumexp over all keys of its scaled scores
    q, k = inputs["q"][-1], inputs["k"]
    scores = torch.einsum("hd,khd->hk", q, k) * 16**-0.5
    torch.testing.assert_close(lse[:, -1], scores.logsumexp(-1), atol=FP32[0], rtol=FP32[1])
    assert out.abs().sum() > 0


def test_sliding_window_wider_than_the_sequence_is_plain_causal(load_kernel):
    mod = load_kernel("triton/attention/sliding_window_prefill_block_skip.py")
    inputs = mod.make_inputs({"batch": 1, "num_heads_q": 1, "num_heads_kv": 1, "seq_len": 20,
                              "head_dim": 16, "window": 1000}, torch.float32)  # fmt: skip
    out = mod.sliding_window_prefill_block_skip(**inputs, block_m=16, block_n=16)
    q, k, v = (inputs[n][0, 0] for n in "qkv")
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    probs = (q @ k.T * 16**-0.5).masked_fill(~causal, -torch.inf).softmax(-1)
    torch.testing.assert_close(out[0, 0], probs @ v, atol=FP32[0], rtol=FP32[1])


def test_multi_query_first_token_ignores_the_later_new_tokens(load_kernel):
    mod = load_kernel("triton/attention/paged_decode_attention_multi_query.py")
    shape = {"seq_lens": [21], "num_queries": 3, "num_heads_q": 2, "num_heads_kv": 1,
             "head_dim": 16}  # fmt: skip
    inputs = mod.make_inputs(shape, torch.float32)
    first = mod.paged_decode_attention_multi_query(**inputs)[0, 0]
    # overwrite the keys/values of the two later new tokens (positions 19, 20): token 0 unchanged
    page, slot = inputs["block_table"][0, 1], torch.tensor([3, 4])
    inputs["k_cache"][page, slot] = 100.0
    inputs["v_cache"][page, slot] = 100.0
    again = mod.paged_decode_attention_multi_query(**inputs)
    torch.testing.assert_close(again[0, 0], first)
    assert not torch.allclose(again[0, 2], first)


# ------------------------------------------------------------------ input validation
def test_kernels_reject_bad_inputs(load_kernel):
    def load(name):
        return load_kernel(f"triton/attention/{name}.py")

    ua = load("unified_attention_diag_split_loop").make_inputs(
        {"seq_lens": [5], "num_heads_q": 3, "num_heads_kv": 2, "head_dim": 16}, torch.float32
    )
    for name in ("unified_attention_diag_split_loop", "unified_attention_persistent_work_list"):
        with pytest.raises(ValueError, match="HQ % HKV"):
            getattr(load(name), name)(**ua)
    mod = load("attention_forward_diag_split_varlen")
    af = mod.make_inputs({"seq_lens": [5], "num_heads_q": 2, "head_dim": 16}, torch.float32)
    with pytest.raises(ValueError, match="int32"):
        mod.attention_forward_diag_split_varlen(**{**af, "cu_seqlens_k": af["cu_seqlens_k"].long()})
    mod = load("paged_decode_attention_multi_query")
    mq = mod.make_inputs({"seq_lens": [20], "num_queries": 40, "num_heads_q": 4,
                          "num_heads_kv": 1, "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="> 128"):
        mod.paged_decode_attention_multi_query(**mq)
    mod = load("flash_decoding_dense_split_kv")
    fd = mod.make_inputs({"batch": 1, "seq_len": 8, "num_heads_q": 2, "num_heads_kv": 2,
                          "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="num_splits"):
        mod.flash_decoding_dense_split_kv(**fd, num_splits=3)
    mod = load("sliding_window_prefill_block_skip")
    sw = mod.make_inputs({"batch": 1, "num_heads_q": 1, "num_heads_kv": 1, "seq_len": 8,
                          "head_dim": 16, "window": 0}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="window"):
        mod.sliding_window_prefill_block_skip(**sw)
    mod = load("cross_attention_non_causal")
    ca = mod.make_inputs({"batch": 2, "len_q": 3, "len_k": 5, "num_heads_q": 2,
                          "num_heads_kv": 2, "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="kv_lens"):
        mod.cross_attention_non_causal(**{**ca, "kv_lens": torch.ones(3, dtype=torch.int32)})
    mod = load("attention_with_lse_output")
    lo = mod.make_inputs({"seq_lens": [5], "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16},
                         torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="dtype"):
        mod.attention_with_lse_output(**{**lo, "k": lo["k"].double()})
    mod = load("prefix_cached_prefill_two_source")
    pc = mod.make_inputs({"new_lens": [5], "prefix_lens": [3], "num_heads_q": 2,
                          "num_heads_kv": 2, "head_dim": 16}, torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="prefix_lens"):
        mod.prefix_cached_prefill_two_source(**{**pc, "prefix_lens": pc["prefix_lens"][:0]})
    mod = load("mla_decode_attention_latent_tiled")
    ml = mod.make_inputs({"seq_lens": [4], "num_heads": 2, "kv_lora_rank": 16, "rope_dim": 16},
                         torch.float32)  # fmt: skip
    with pytest.raises(ValueError, match="kv_lora_rank"):
        mod.mla_decode_attention_latent_tiled(**{**ml, "kv_lora_rank": 40})
    mod = load("paged_decode_attention_block_outer")
    po = mod.make_inputs({"seq_lens": [4], "num_heads_q": 2, "num_heads_kv": 2, "head_dim": 16},
                         torch.bfloat16)  # fmt: skip
    with pytest.raises(ValueError, match="bf16 or fp16"):
        mod.paged_decode_attention_block_outer(
            **{
                k: v.float() if k != "block_tables" and k != "seq_lens" else v
                for k, v in po.items()
            }
        )
