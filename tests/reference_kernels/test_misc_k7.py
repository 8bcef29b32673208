"""Misc reference kernels (k7 set: cache, conv, sampling, RWKV) against their PyTorch references.

Every kernel runs in Triton's interpreter on tiny shapes (CI budget: about 3 s per kernel); each
check pairs assert_close (or exact equality) with a whole-output norm check, so an all-zero or
untouched output cannot pass.
"""

import pytest
import torch

BF16 = torch.bfloat16
F32 = torch.float32


def _close(out: torch.Tensor, ref: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """assert_close plus a norm check of the whole output (fp32)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    o, r = out.float().nan_to_num(posinf=0, neginf=0), ref.float().nan_to_num(posinf=0, neginf=0)
    assert r.norm() > 0
    assert abs(o.norm() - r.norm()) <= 1e-2 * r.norm()


# ------------------------------------------------------------------ reshape_and_cache_token_tile_2d
RC2D = "triton/cache/reshape_and_cache_token_tile_2d.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"tokens": 13, "heads": 3, "head_dim": 20}, F32),
        ({"tokens": 9, "heads": 2, "head_dim": 32, "block_size": 8}, BF16),
        ({"tokens": 1, "heads": 5, "head_dim": 16}, F32),
    ],
    ids=str,
)
def test_reshape_and_cache_token_tile_2d(load_kernel, shape, dtype):
    mod = load_kernel(RC2D)
    inputs = mod.make_inputs(shape, dtype)
    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    ref = mod.reference(**{**inputs, **caches})  # updates its own copies in place
    out = mod.reshape_and_cache_token_tile_2d(**inputs)
    assert out[0] is inputs["key_cache"]  # in place
    for o, r in zip(out, ref, strict=True):
        assert torch.equal(o, r) and r.float().norm() > 0


@pytest.mark.parametrize("cfg", [{"block_t": 1, "block_h": 1, "num_warps": 1},
                                 {"block_t": 16, "block_h": 8, "num_warps": 8}])  # fmt: skip
def test_reshape_and_cache_token_tile_2d_tuning_and_strided_views(load_kernel, cfg):
    # key/value are slices of a fused qkv buffer and the caches head-major views: no copies needed
    mod = load_kernel(RC2D)
    t, h, d, bs = 11, 3, 8, 4
    qkv = torch.randn(t, 3, h, d)
    kc = torch.randn(4, h, bs, d).transpose(1, 2)
    vc = torch.randn(4, h, bs, d).transpose(1, 2)
    slots = torch.tensor([3, -1, 0, 7, 15, 12, -1, 9, 1, 2, 4])
    ref = mod.reference(qkv[:, 1], qkv[:, 2], kc.clone(), vc.clone(), slots)
    out = mod.reshape_and_cache_token_tile_2d(qkv[:, 1], qkv[:, 2], kc, vc, slots, **cfg)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def test_reshape_and_cache_token_tile_2d_rejects_bad_inputs(load_kernel):
    mod = load_kernel(RC2D)
    inputs = mod.make_inputs({"tokens": 4, "heads": 2, "head_dim": 8}, F32)
    with pytest.raises(ValueError, match="slot_mapping"):
        mod.reshape_and_cache_token_tile_2d(
            **{**inputs, "slot_mapping": inputs["slot_mapping"].float()}
        )
    with pytest.raises(ValueError, match="caches"):
        mod.reshape_and_cache_token_tile_2d(
            **{**inputs, "value_cache": inputs["value_cache"][:, :, :1]}
        )
    with pytest.raises(ValueError, match="power of two"):
        mod.reshape_and_cache_token_tile_2d(**inputs, block_t=3)


# ------------------------------------------------------------ causal_conv1d_varlen_initial_states
CONV_VL = "triton/conv/causal_conv1d_varlen_initial_states.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"dim": 20, "seqlens": [5, 1, 13, 2]}, F32),
        ({"dim": 33, "seqlens": [9, 3], "width": 3}, BF16),
        ({"dim": 8, "seqlens": [2]}, F32),  # shorter than the filter: state lanes only
    ],
    ids=str,
)
def test_causal_conv1d_varlen(load_kernel, shape, dtype):
    mod = load_kernel(CONV_VL)
    inputs = mod.make_inputs(shape, dtype)
    tol = 2e-2 if dtype == BF16 else 1e-5
    _close(mod.causal_conv1d_varlen_initial_states(**inputs), mod.reference(**inputs), tol, tol)


@pytest.mark.parametrize("cfg", [{"block_c": 8, "block_t": 8, "num_warps": 1},
                                 {"block_c": 128, "block_t": 128, "num_warps": 8}])  # fmt: skip
def test_causal_conv1d_varlen_tuning_no_state_no_act(load_kernel, cfg):
    # channel-last x (stride 1 over channels), no bias/state/flags, identity activation
    mod = load_kernel(CONV_VL)
    inputs = mod.make_inputs({"dim": 10, "seqlens": [11, 4, 7]}, F32)
    x = inputs["x"].t().contiguous().t()
    args = {"x": x, "weight": inputs["weight"], "cu_seqlens": inputs["cu_seqlens"],
            "activation": None}  # fmt: skip
    _close(mod.causal_conv1d_varlen_initial_states(**args, **cfg), mod.reference(**args))


def test_causal_conv1d_varlen_single_sequence_without_cu_seqlens(load_kernel):
    # atrex30's form: one sequence, no cu_seqlens tensor (the kernel takes L as a scalar)
    mod = load_kernel(CONV_VL)
    inputs = mod.make_inputs({"dim": 20, "seqlens": [37]}, F32)
    args = {**inputs, "cu_seqlens": None, "has_initial_state": None}
    _close(mod.causal_conv1d_varlen_initial_states(**args), mod.reference(**args))


def test_causal_conv1d_varlen_rejects_bad_inputs(load_kernel):
    mod = load_kernel(CONV_VL)
    inputs = mod.make_inputs({"dim": 4, "seqlens": [3, 2]}, F32)
    with pytest.raises(ValueError, match="initial_state must be"):
        mod.causal_conv1d_varlen_initial_states(
            **{**inputs, "initial_state": inputs["initial_state"][:1]}
        )
    with pytest.raises(ValueError, match="activation"):
        mod.causal_conv1d_varlen_initial_states(**inputs, activation="gelu")
    with pytest.raises(ValueError, match="cu_seqlens"):
        mod.causal_conv1d_varlen_initial_states(
            **{**inputs, "cu_seqlens": inputs["cu_seqlens"].float()}
        )


# ------------------------------------------------------------------ paged_kv_gather_to_contiguous
GATHER = "triton/cache/paged_kv_gather_to_contiguous.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"seq_lens": [5, 17, 0, 8], "heads": 2, "head_dim": 16}, F32),
        ({"seq_lens": [3, 9], "heads": 3, "head_dim": 8, "block_size": 4}, BF16),
        ({"seq_lens": [1], "heads": 1, "head_dim": 32}, F32),
    ],
    ids=str,
)
def test_paged_kv_gather_to_contiguous(load_kernel, shape, dtype):
    mod = load_kernel(GATHER)
    inputs = mod.make_inputs(shape, dtype)
    out, ref = mod.paged_kv_gather_to_contiguous(**inputs), mod.reference(**inputs)
    for o, r in zip(out, ref, strict=True):
        assert o.dtype == r.dtype and torch.equal(o, r) and r.float().norm() > 0


@pytest.mark.parametrize("cfg", [{"block_t": 1, "block_c": 64, "num_warps": 1},
                                 {"block_t": 64, "block_c": 1024, "num_warps": 8}])  # fmt: skip
def test_paged_kv_gather_to_contiguous_tuning_strided_cache(load_kernel, cfg):
    mod = load_kernel(GATHER)
    inputs = mod.make_inputs({"seq_lens": [6, 11], "heads": 3, "head_dim": 8}, F32)
    kc = inputs["key_cache"].transpose(1, 2).contiguous().transpose(1, 2)  # head-major pages
    inputs = {**inputs, "key_cache": kc}
    out, ref = mod.paged_kv_gather_to_contiguous(**inputs, **cfg), mod.reference(**inputs)
    assert all(torch.equal(o, r) for o, r in zip(out, ref, strict=True))
    # without max_seqlen the grid spans total_tokens tiles per sequence; surplus tiles exit
    out = mod.paged_kv_gather_to_contiguous(**{**inputs, "max_seqlen": None}, **cfg)
    assert all(torch.equal(o, r) for o, r in zip(out, ref, strict=True))


def test_paged_kv_gather_to_contiguous_rejects_bad_inputs(load_kernel):
    mod = load_kernel(GATHER)
    inputs = mod.make_inputs({"seq_lens": [3, 4], "heads": 1, "head_dim": 8}, F32)
    table, bs = inputs["block_table"], inputs["key_cache"].shape[1]
    mod.check_inputs(table, inputs["seq_lens"], bs, 7, 4)
    with pytest.raises(ValueError, match="seq_lens"):
        mod.check_inputs(table, torch.tensor([3, 99], dtype=torch.int32), bs, 102)
    with pytest.raises(ValueError, match="total_tokens"):
        mod.check_inputs(table, inputs["seq_lens"], bs, 6)
    with pytest.raises(ValueError, match="max_seqlen"):
        mod.check_inputs(table, inputs["seq_lens"], bs, 7, 3)
    with pytest.raises(ValueError, match="total_tokens"):
        mod.paged_kv_gather_to_contiguous(**{**inputs, "total_tokens": -1})
    with pytest.raises(ValueError, match="block_table"):
        mod.paged_kv_gather_to_contiguous(
            **{**inputs, "block_table": inputs["block_table"].float()}
        )


# ------------------------------------------------------------------ kv_cache_copy_blocks
COPY = "triton/cache/kv_cache_copy_blocks.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"blocks": 9, "block_size": 4, "heads": 2, "head_dim": 16, "pairs": 3}, F32),
        ({"blocks": 6, "block_size": 8, "heads": 3, "head_dim": 8, "pairs": 2}, BF16),
        ({"blocks": 2, "block_size": 2, "heads": 1, "head_dim": 5, "pairs": 1}, F32),
    ],
    ids=str,
)
def test_kv_cache_copy_blocks(load_kernel, shape, dtype):
    mod = load_kernel(COPY)
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(**{k: v.clone() for k, v in inputs.items()})  # updates its args in place
    out = mod.kv_cache_copy_blocks(**inputs)
    assert out[0] is inputs["key_cache"] and out[1] is inputs["value_cache"]
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    dst = inputs["block_mapping"][:, 1]
    assert not torch.equal(ref[0][dst], torch.zeros_like(ref[0][dst]))


@pytest.mark.parametrize("cfg", [{"block": 256, "num_warps": 1}, {"block": 4096, "num_warps": 8}])
def test_kv_cache_copy_blocks_tuning_int32_mapping(load_kernel, cfg):
    mod = load_kernel(COPY)
    shape = {"blocks": 5, "block_size": 16, "heads": 2, "head_dim": 24, "pairs": 2}
    inputs = mod.make_inputs(shape, F32)
    inputs["block_mapping"] = inputs["block_mapping"].to(torch.int32)
    ref = mod.reference(**{k: v.clone() for k, v in inputs.items()})
    out = mod.kv_cache_copy_blocks(**inputs, **cfg)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def test_kv_cache_copy_blocks_rejects_bad_inputs(load_kernel):
    mod = load_kernel(COPY)
    inputs = mod.make_inputs(
        {"blocks": 4, "block_size": 2, "heads": 2, "head_dim": 4, "pairs": 1}, F32
    )
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        mod.check_inputs(inputs["key_cache"], torch.tensor([[0, 4]]))
    mod.check_inputs(inputs["key_cache"], inputs["block_mapping"])
    # the launcher reads no id on the host: the kernel skips a pair with an id out of range
    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    out = mod.kv_cache_copy_blocks(kc, vc, torch.tensor([[0, 4], [-1, 2], [1, 3]]))
    ref = mod.reference(inputs["key_cache"].clone(), inputs["value_cache"].clone(),
                        torch.tensor([[1, 3]]))  # fmt: skip
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    with pytest.raises(ValueError, match="contiguous"):
        strided = inputs["key_cache"].transpose(1, 2).contiguous().transpose(1, 2)
        mod.kv_cache_copy_blocks(**{**inputs, "key_cache": strided})
    with pytest.raises(ValueError, match=r"\(P, 2\)"):
        mod.kv_cache_copy_blocks(**{**inputs, "block_mapping": torch.tensor([0, 1])})


# ------------------------------------------------------------------ reshape_and_cache_mla_latent
MLA = "triton/cache/reshape_and_cache_mla_latent.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"tokens": 11, "kv_lora_rank": 48, "rope_dim": 16, "block_size": 4}, F32),
        ({"tokens": 6, "kv_lora_rank": 64, "rope_dim": 8}, BF16),
        ({"tokens": 1, "kv_lora_rank": 20, "rope_dim": 6}, F32),
    ],
    ids=str,
)
def test_reshape_and_cache_mla_latent(load_kernel, shape, dtype):
    mod = load_kernel(MLA)
    inputs = mod.make_inputs(shape, dtype)
    if shape["tokens"] == 1:
        inputs["slot_mapping"][0] = 5  # the only token is real
    before = inputs["kv_cache"].clone()
    ref = mod.reference(**{**inputs, "kv_cache": before.clone()})  # it writes in place too
    out = mod.reshape_and_cache_mla_latent(**inputs)
    assert out is inputs["kv_cache"] and torch.equal(out, ref) and not torch.equal(out, before)


@pytest.mark.parametrize("cfg", [{"block_t": 1, "block_l": 64, "num_warps": 1},
                                 {"block_t": 32, "block_l": 512, "num_warps": 8}])  # fmt: skip
def test_reshape_and_cache_mla_latent_tuning(load_kernel, cfg):
    mod = load_kernel(MLA)
    inputs = mod.make_inputs({"tokens": 9, "kv_lora_rank": 130, "rope_dim": 10}, F32)
    ref = mod.reference(**{**inputs, "kv_cache": inputs["kv_cache"].clone()})
    assert torch.equal(mod.reshape_and_cache_mla_latent(**inputs, **cfg), ref)


def test_reshape_and_cache_mla_latent_rejects_bad_inputs(load_kernel):
    mod = load_kernel(MLA)
    inputs = mod.make_inputs({"tokens": 3, "kv_lora_rank": 8, "rope_dim": 4}, F32)
    with pytest.raises(ValueError, match="kv_cache must be"):
        mod.reshape_and_cache_mla_latent(**{**inputs, "kv_cache": inputs["kv_cache"][..., :10]})
    with pytest.raises(ValueError, match="dtypes differ"):
        mod.reshape_and_cache_mla_latent(**{**inputs, "k_pe": inputs["k_pe"].to(BF16)})


# ------------------------------------------------------------------ depthwise_conv2d_nhwc_3x3
DW = "triton/conv/depthwise_conv2d_nhwc_3x3.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ({"batch": 2, "height": 2, "width": 7, "channels": 12}, F32),
        ({"batch": 1, "height": 2, "width": 9, "channels": 40}, BF16),
        ({"batch": 1, "height": 1, "width": 1, "channels": 3}, F32),  # halo only
    ],
    ids=str,
)
def test_depthwise_conv2d_nhwc_3x3(load_kernel, shape, dtype):
    mod = load_kernel(DW)
    inputs = mod.make_inputs(shape, dtype)
    tol = 3e-2 if dtype == BF16 else 1e-5
    _close(mod.depthwise_conv2d_nhwc_3x3(**inputs), mod.reference(**inputs), tol, tol)


@pytest.mark.parametrize("cfg", [{"block_w": 1, "block_c": 16, "num_warps": 1},
                                 {"block_w": 32, "block_c": 256, "num_warps": 8}])  # fmt: skip
def test_depthwise_conv2d_nhwc_3x3_tuning_no_bias(load_kernel, cfg):
    mod = load_kernel(DW)
    inputs = mod.make_inputs({"batch": 1, "height": 2, "width": 3, "channels": 12}, F32)
    inputs["bias"] = None
    _close(mod.depthwise_conv2d_nhwc_3x3(**inputs, **cfg), mod.reference(**inputs))


def test_depthwise_conv2d_nhwc_3x3_rejects_bad_inputs(load_kernel):
    mod = load_kernel(DW)
    inputs = mod.make_inputs({"batch": 1, "height": 2, "width": 2, "channels": 4}, F32)
    with pytest.raises(ValueError, match=r"weight must be \(3, 3, 4\)"):
        mod.depthwise_conv2d_nhwc_3x3(**{**inputs, "weight": torch.randn(4, 3, 3)})
    with pytest.raises(ValueError, match="N, H, W, C"):
        mod.depthwise_conv2d_nhwc_3x3(**{**inputs, "x": inputs["x"][0]})


# ------------------------------------------------------------------ top_p_radix_threshold
TOPP = "triton/sampling/top_p_radix_threshold.py"


def _same_mask(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Exact: the -inf pattern coincides and the kept values are bit copies."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    assert torch.equal(out, ref)
    assert (~torch.isinf(ref)).any(dim=-1).all()  # every row keeps something


@pytest.mark.parametrize(
    "shape",
    [{"rows": 3, "vocab": 100, "top_p": 0.9}, {"rows": 2, "vocab": 37, "top_p": 0.3},
     {"rows": 1, "vocab": 64, "top_p": 1.0}],
    ids=str,
)  # fmt: skip
def test_top_p_radix_threshold(load_kernel, shape):
    mod = load_kernel(TOPP)
    inputs = mod.make_inputs(shape)
    out, ref = mod.top_p_radix_threshold(**inputs), mod.reference(**inputs)
    _same_mask(out, ref)
    if shape["top_p"] < 1.0:
        assert torch.isinf(ref).any()  # the filter removed something


@pytest.mark.parametrize("cfg", [{"radix": 2, "block_v": 64, "num_warps": 1},
                                 {"radix": 16, "block_v": 1024, "num_warps": 16},
                                 {"radix": 4, "block_v": 128, "num_warps": 2}])  # fmt: skip
def test_top_p_radix_threshold_tuning_and_ties(load_kernel, cfg):
    mod = load_kernel(TOPP)
    logits = torch.randint(-3, 3, (2, 300)).float()  # many ties at the boundary
    logits[1] = torch.randn(300) * 2
    out, ref = mod.top_p_radix_threshold(logits, 0.5, **cfg), mod.reference(logits, 0.5)
    _same_mask(out, ref)


def test_top_p_radix_threshold_rejects_bad_inputs(load_kernel):
    mod = load_kernel(TOPP)
    with pytest.raises(ValueError, match="top_p"):
        mod.top_p_radix_threshold(torch.zeros(2, 8), 0.0)
    with pytest.raises(ValueError, match="fp32"):
        mod.top_p_radix_threshold(torch.zeros(2, 8, dtype=BF16))
    with pytest.raises(ValueError, match="radix must be"):
        mod.top_p_radix_threshold(torch.zeros(2, 8), radix=8)
    with pytest.raises(ValueError, match="block_v"):
        mod.top_p_radix_threshold(torch.zeros(2, 8), radix=16, block_v=2048)


# ------------------------------------------------------------------ inverse_cdf_multinomial
ICDF = "triton/sampling/inverse_cdf_multinomial.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [({"rows": 16, "vocab": 100}, F32), ({"rows": 8, "vocab": 33}, BF16),
     ({"rows": 4, "vocab": 1}, F32)],
    ids=str,
)  # fmt: skip
def test_inverse_cdf_multinomial(load_kernel, shape, dtype):
    mod = load_kernel(ICDF)
    inputs = mod.make_inputs(shape, dtype)
    if shape["vocab"] == 1:
        inputs["probs"].fill_(0.5)
    ids, ref = mod.inverse_cdf_multinomial(**inputs), mod.reference(**inputs)
    assert ids.dtype == torch.int64 and torch.equal(ids, ref)
    assert (inputs["probs"].gather(1, ids[:, None]) > 0).all()  # never a zero-probability id
    if shape["vocab"] > 1:
        assert ids.unique().numel() > 1  # not a constant answer


@pytest.mark.parametrize(
    "cfg", [{"block_v": 256, "num_warps": 1}, {"block_v": 4096, "num_warps": 16}]
)
def test_inverse_cdf_multinomial_tuning_and_edges(load_kernel, cfg):
    # u = 0 picks the first nonzero entry; u -> 1 the last; chunk boundaries at 256
    mod = load_kernel(ICDF)
    probs = torch.zeros(3, 600)
    probs[:, [5, 255, 256, 599]] = torch.tensor([0.25, 0.25, 0.25, 0.25])
    u = torch.tensor([0.0, 0.5, 0.9999])
    ids = mod.inverse_cdf_multinomial(probs, u, **cfg)
    assert ids.tolist() == [5, 256, 599]
    assert torch.equal(ids, mod.reference(probs, u))


def test_inverse_cdf_multinomial_rejects_bad_inputs(load_kernel):
    mod = load_kernel(ICDF)
    with pytest.raises(ValueError, match="u must be"):
        mod.inverse_cdf_multinomial(torch.rand(2, 8), torch.rand(3))
    with pytest.raises(ValueError, match="probs must be"):
        mod.inverse_cdf_multinomial(torch.ones(2, 8, dtype=torch.int64), torch.rand(2))


# ------------------------------------------------------------------ presence_frequency_penalty
PEN = "triton/sampling/presence_frequency_penalty.py"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [({"rows": 5, "vocab": 300}, F32), ({"rows": 3, "vocab": 130}, BF16),
     ({"rows": 1, "vocab": 7}, F32)],
    ids=str,
)  # fmt: skip
def test_presence_frequency_penalty(load_kernel, shape, dtype):
    mod = load_kernel(PEN)
    inputs = mod.make_inputs(shape, dtype)
    inputs["counts"][:, 0] = 2  # every row has a seen token (random counts may leave none)
    out, ref = mod.presence_frequency_penalty(**inputs), mod.reference(**inputs)
    tol = 1e-2 if dtype == BF16 else 1e-6
    _close(out, ref, tol, tol)
    changed = inputs["counts"] > 0
    assert not torch.equal(out[changed], inputs["logits"][changed])  # penalties did apply


@pytest.mark.parametrize("cfg", [{"block_m": 1, "block_v": 128, "num_warps": 1},
                                 {"block_m": 16, "block_v": 2048, "num_warps": 8}])  # fmt: skip
def test_presence_frequency_penalty_tuning_int64_counts(load_kernel, cfg):
    mod = load_kernel(PEN)
    inputs = mod.make_inputs({"rows": 3, "vocab": 200}, F32)
    inputs["counts"] = inputs["counts"].long()
    _close(mod.presence_frequency_penalty(**inputs, **cfg), mod.reference(**inputs))


def test_presence_frequency_penalty_rejects_bad_inputs(load_kernel):
    mod = load_kernel(PEN)
    inputs = mod.make_inputs({"rows": 2, "vocab": 8}, F32)
    with pytest.raises(ValueError, match="counts must be"):
        mod.presence_frequency_penalty(**{**inputs, "counts": inputs["counts"].float()})
    with pytest.raises(ValueError, match="presence_penalty must be"):
        mod.presence_frequency_penalty(**{**inputs, "presence_penalty": torch.rand(3)})


# ------------------------------------------------------------------ typical_p_filter
TYPICAL = "triton/sampling/typical_p_filter.py"


@pytest.mark.parametrize(
    "shape",
    [{"rows": 3, "vocab": 100, "typical_p": 0.9}, {"rows": 2, "vocab": 41, "typical_p": 0.2},
     {"rows": 1, "vocab": 16, "typical_p": 1.0}],
    ids=str,
)  # fmt: skip
def test_typical_p_filter(load_kernel, shape):
    mod = load_kernel(TYPICAL)
    inputs = mod.make_inputs(shape)
    out, ref = mod.typical_p_filter(**inputs), mod.reference(**inputs)
    _same_mask(out, ref)
    if shape["typical_p"] < 1.0:
        assert torch.isinf(ref).any()
        # typical, not top-p: the most likely token is dropped in some row at low mass
    if shape["typical_p"] == 0.2:
        assert torch.isinf(out.gather(1, inputs["logits"].argmax(1, keepdim=True))).any()


@pytest.mark.parametrize(
    "cfg", [{"block_v": 256, "num_warps": 1}, {"block_v": 4096, "num_warps": 16}]
)
def test_typical_p_filter_tuning_and_ties(load_kernel, cfg):
    mod = load_kernel(TYPICAL)
    logits = torch.randint(-3, 3, (2, 300)).float()  # tied scores at the boundary
    out, ref = mod.typical_p_filter(logits, 0.5, **cfg), mod.reference(logits, 0.5)
    _same_mask(out, ref)


def test_typical_p_filter_rejects_bad_inputs(load_kernel):
    mod = load_kernel(TYPICAL)
    with pytest.raises(ValueError, match="typical_p"):
        mod.typical_p_filter(torch.zeros(2, 8), 1.5)
    with pytest.raises(ValueError, match="fp32"):
        mod.typical_p_filter(torch.zeros(8))


# ------------------------------------------------------------------ rwkv_wkv_recurrent_state
RWKV = "triton/other/rwkv_wkv_recurrent_state.py"


def _wkv_direct(w, u, k, v):
    """y_t from the defining sums (no state, fp64): an independent check of the stable form."""
    kd, vd, wd, ud = k.double(), v.double(), w.double(), u.double()
    ys = []
    for t in range(k.shape[1]):
        i = torch.arange(t, dtype=torch.float64)
        decay = ((t - 1 - i)[:, None] * wd + kd[:, :t]).exp()  # (B, t, C)
        cur = (ud + kd[:, t]).exp()
        ys.append(((decay * vd[:, :t]).sum(1) + cur * vd[:, t]) / (decay.sum(1) + cur))
    return torch.stack(ys, dim=1)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [({"batch": 2, "tokens": 7, "channels": 40}, F32),
     ({"batch": 1, "tokens": 5, "channels": 70}, BF16),
     ({"batch": 3, "tokens": 1, "channels": 8}, F32)],
    ids=str,
)  # fmt: skip
def test_rwkv_wkv_recurrent_state(load_kernel, shape, dtype):
    mod = load_kernel(RWKV)
    inputs = mod.make_inputs(shape, dtype)
    (y, st), (y_ref, st_ref) = mod.rwkv_wkv_recurrent_state(**inputs), mod.reference(**inputs)
    tol = 2e-2 if dtype == BF16 else 1e-5
    _close(y, y_ref, tol, tol)
    _close(st, st_ref, 1e-5, 1e-5)


@pytest.mark.parametrize("cfg", [{"block_c": 16, "num_warps": 1}, {"block_c": 256, "num_warps": 8}])
def test_rwkv_wkv_tuning_matches_direct_sums_and_chunks(load_kernel, cfg):
    # no state: y equals the defining sums; two chunks with the state carried equal one pass
    mod = load_kernel(RWKV)
    inputs = mod.make_inputs({"batch": 2, "tokens": 6, "channels": 20}, F32)
    w, u, k, v = inputs["w"], inputs["u"], inputs["k"], inputs["v"]
    y, st = mod.rwkv_wkv_recurrent_state(w, u, k, v, **cfg)
    _close(y, _wkv_direct(w, u, k, v).float(), 1e-5, 1e-5)
    y1, st1 = mod.rwkv_wkv_recurrent_state(w, u, k[:, :4], v[:, :4], **cfg)
    y2, st2 = mod.rwkv_wkv_recurrent_state(w, u, k[:, 4:], v[:, 4:], st1, **cfg)
    _close(torch.cat([y1, y2], dim=1), y)
    _close(st2, st)


def test_rwkv_wkv_rejects_bad_inputs(load_kernel):
    mod = load_kernel(RWKV)
    inputs = mod.make_inputs({"batch": 1, "tokens": 2, "channels": 4}, F32)
    with pytest.raises(ValueError, match="state must be"):
        mod.rwkv_wkv_recurrent_state(**{**inputs, "state": inputs["state"][:, :2]})
    with pytest.raises(ValueError, match="w must be"):
        mod.rwkv_wkv_recurrent_state(**{**inputs, "w": inputs["w"].double()})
