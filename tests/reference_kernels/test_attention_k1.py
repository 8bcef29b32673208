"""Attention reference kernels (helper k1) against their own ``reference()``, interpreted."""

from pathlib import Path

import pytest
import torch

from aka.spec.frontmatter import kernel_header
from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

KERNELS = Path(__file__).resolve().parents[2] / "reference_kernels"
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL

PREFILL = [
    {"seq_lens": [1, 17, 33], "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 32},
    # kv_len > q_len (cached context), a group of 3 and a non-power-of-two head_dim
    {"seq_lens": [5, 17, 20], "context_lens": [0, 30, 3], "num_heads_q": 6, "num_heads_kv": 2,
     "head_dim": 40},
    {"seq_lens": [16, 2], "num_heads_q": 4, "num_heads_kv": 1, "head_dim": 64},  # MQA, one tile
]  # fmt: skip
DECODE_PAGED = [  # vLLM's cache layout (5-D split-x keys, (D, page) values) unless "flat"
    {"seq_lens": [1, 17, 33], "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 32},
    {"seq_lens": [0, 40, 16], "num_heads_q": 6, "num_heads_kv": 2, "head_dim": 40},
    {"seq_lens": [70], "num_heads_q": 4, "num_heads_kv": 4, "head_dim": 64},
    {"seq_lens": [1, 17, 33], "num_heads_q": 4, "num_heads_kv": 2, "head_dim": 32,
     "layout": "flat"},
    {"seq_lens": [0, 40, 16], "num_heads_q": 6, "num_heads_kv": 2, "head_dim": 40,
     "layout": "flat"},
]  # fmt: skip
MLA = [
    {"batch": 2, "num_heads": 4, "seq_len": 37, "kv_lora_rank": 64, "rope_dim": 16},
    {"batch": 3, "num_heads": 20, "seq_len": 40, "seq_lens": [0, 17, 40], "kv_lora_rank": 64,
     "rope_dim": 16},
    {"batch": 1, "num_heads": 16, "seq_len": 16, "kv_lora_rank": 48, "rope_dim": 24},
]  # fmt: skip
MLA_SPLIT = [  # atrex30's packed cache (sum(seq_lens), 1, R + P) unless "padded"
    {"seq_lens": [37, 5, 20], "num_heads": 4, "kv_lora_rank": 64, "rope_dim": 16},
    {"seq_lens": [0, 17, 40], "num_heads": 20, "kv_lora_rank": 64, "rope_dim": 16},  # ragged
    # batch 1: 2 chunks of 16 tokens for 4 splits; a non-power-of-two rank, rope under 16
    {"seq_lens": [20], "num_heads": 16, "kv_lora_rank": 40, "rope_dim": 8},
    *[dict(s, layout="padded") for s in MLA],
]  # fmt: skip
VARLEN = [
    {"seq_lens": [1, 17, 33], "num_heads": 4, "head_dim": 32},
    {"seq_lens": [5, 40, 20], "num_heads": 4, "num_heads_kv": 2, "head_dim": 40},
    {"seq_lens": [16, 2], "num_heads": 2, "head_dim": 64},
    # own key lengths (cu_seqlens_k): more keys than queries, fewer (causal: the first rows see
    # no key), no keys, no queries
    {"seq_lens": [1, 17, 33, 5, 0], "kv_lens": [9, 40, 20, 0, 7], "num_heads": 4,
     "num_heads_kv": 2, "head_dim": 40},
]  # fmt: skip
DECODE_DENSE = [
    {"batch": 3, "seq_len": 33, "seq_lens": [1, 17, 33], "num_heads_q": 4, "num_heads_kv": 2,
     "head_dim": 32},
    {"batch": 2, "seq_len": 40, "seq_lens": [0, 40], "num_heads_q": 6, "num_heads_kv": 2,
     "head_dim": 40},
    {"batch": 2, "seq_len": 20, "num_heads_q": 20, "num_heads_kv": 1, "head_dim": 64},  # group 20
]  # fmt: skip

# kernel id -> (shapes, small tiles that force several tiles/splits on the tiny shapes)
KERNEL_CASES = {
    "unified_attention_qblock": (PREFILL, {"block_m": 16, "block_n": 16}),
    "unified_attention_gqa_packed": (PREFILL, {"block_m": 16, "block_n": 16}),
    "paged_decode_attention_per_head": (DECODE_PAGED, {"pages_per_step": 1}),
    "paged_decode_attention_split_kv": (DECODE_PAGED, {"partition_size": 16}),
    "mla_decode_attention_absorbed": (MLA, {"block_n": 16}),
    "mla_decode_attention_split": (MLA_SPLIT, {"num_kv_splits": 4, "block_n": 16}),
    "flash_attention_varlen_fwd": (VARLEN, {"block_m": 16, "block_n": 16}),
    "flash_attention_varlen_causal_skip": (
        [dict(s, causal=c) for s in VARLEN for c in (True, False)],
        {"block_m": 16, "block_n": 16},
    ),
    "attention_decode_dense_gqa": (DECODE_DENSE, {"block_n": 16}),
}


def _path(kernel_id: str) -> str:
    return f"triton/attention/{kernel_id}.py"


def _tuning_extremes(kernel_id: str) -> list[dict]:
    """The declared tuning space's first values, its last values, and the heuristic (empty)."""
    meta, _ = kernel_header((KERNELS / _path(kernel_id)).read_text(), source=kernel_id)
    tuning = meta["tuning"]
    return [{k: v[0] for k, v in tuning.items()}, {k: v[-1] for k, v in tuning.items()}, {}]


def _check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so an all-zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


def _run(mod, kernel_id: str, inputs: dict, tuning: dict) -> torch.Tensor:
    return getattr(mod, kernel_id)(**inputs, **tuning)


def _case_id(kernel_id: str, index: int, shape: dict) -> str:
    causal = {True: "-causal", False: "-full"}.get(shape.get("causal"), "")
    return f"{kernel_id}-case{index}{causal}"


@pytest.mark.parametrize(
    ("kernel_id", "shape"),
    [
        pytest.param(k, s, id=_case_id(k, i, s))
        for k, (shapes, _) in KERNEL_CASES.items()
        for i, s in enumerate(shapes)
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_attention_k1_matches_reference(load_kernel, kernel_id, shape, dtype):
    mod = load_kernel(_path(kernel_id))
    inputs = mod.make_inputs(shape, dtype)
    out = _run(mod, kernel_id, inputs, KERNEL_CASES[kernel_id][1])
    _check(out, mod.reference(**inputs), dtype)


@pytest.mark.parametrize("kernel_id", list(KERNEL_CASES))
@pytest.mark.parametrize("which", [0, 1, 2], ids=["first", "last", "heuristic"])
def test_attention_k1_tuning_extremes(load_kernel, kernel_id, which):
    mod = load_kernel(_path(kernel_id))
    shapes, _ = KERNEL_CASES[kernel_id]
    inputs = mod.make_inputs(shapes[0], torch.float32)
    out = _run(mod, kernel_id, inputs, _tuning_extremes(kernel_id)[which])
    _check(out, mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize(
    "kernel_id", ["flash_attention_varlen_fwd", "flash_attention_varlen_causal_skip"]
)
def test_varlen_without_max_seqlen_sizes_grid_by_tokens(load_kernel, kernel_id):
    # no host read of cu_seqlens: without max_seqlen the grid spans every token, surplus exits
    mod = load_kernel(_path(kernel_id))
    inputs = mod.make_inputs(VARLEN[1], torch.float32)
    assert inputs.pop("max_seqlen") == 40
    out = getattr(mod, kernel_id)(**inputs, block_m=16, block_n=16)
    _check(out, mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize(
    "kernel_id", ["flash_attention_varlen_fwd", "flash_attention_varlen_causal_skip"]
)
def test_varlen_cu_seqlens_k_defaults_to_the_query_boundaries(load_kernel, kernel_id):
    mod = load_kernel(_path(kernel_id))
    inputs = mod.make_inputs(VARLEN[0], torch.float32)
    assert "cu_seqlens_k" not in inputs
    out = getattr(mod, kernel_id)(**inputs, block_m=16, block_n=16)
    same = getattr(mod, kernel_id)(**inputs, cu_seqlens_k=inputs["cu_seqlens"].clone())
    _check(out, mod.reference(**inputs), torch.float32)
    _check(same, out, torch.float32)
    # keys with their own token count need their own boundaries
    inputs["k"], inputs["v"] = inputs["k"][:-1], inputs["v"][:-1]
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        getattr(mod, kernel_id)(**inputs)


@pytest.mark.parametrize(
    "kernel_id", ["paged_decode_attention_per_head", "paged_decode_attention_split_kv"]
)
def test_paged_decode_vllm_and_flat_layouts_agree(load_kernel, kernel_id):
    # the same cache values stored both ways: 4-D (NB, HKV, page, D) for K and V, and vLLM's
    # 5-D split-x keys (NB, HKV, D / x, page, x) with values (NB, HKV, D, page)
    mod = load_kernel(_path(kernel_id))
    flat = mod.make_inputs(dict(DECODE_PAGED[1], layout="flat"), torch.bfloat16)
    nb, hkv, page, d = flat["k_cache"].shape
    vllm = dict(flat)
    vllm["k_cache"] = flat["k_cache"].view(nb, hkv, page, d // 8, 8).permute(0, 1, 3, 2, 4)
    vllm["k_cache"] = vllm["k_cache"].contiguous()
    vllm["v_cache"] = flat["v_cache"].transpose(2, 3).contiguous()
    out_flat = getattr(mod, kernel_id)(**flat)
    torch.testing.assert_close(getattr(mod, kernel_id)(**vllm), out_flat, atol=0, rtol=0)
    _check(out_flat, mod.reference(**vllm), torch.bfloat16)


def test_mla_split_packed_and_padded_layouts_agree(load_kernel):
    # the same values both ways: packed rows [c_kv | k_pe] back to back, and a padded (B, T, R)
    # latent cache with k_pe (B, T, P) apart, random rows past each length
    mod = load_kernel(_path("mla_decode_attention_split"))
    fn, tuning = mod.mla_decode_attention_split, {"num_kv_splits": 4, "block_n": 16}
    packed = mod.make_inputs(MLA_SPLIT[1], torch.bfloat16)
    q, kv, lens, r = packed["q"], packed["kv_cache"], packed["seq_lens"], packed["kv_lora_rank"]
    full = torch.randn(3, 45, kv.shape[2]).to(torch.bfloat16)
    full[1, :17], full[2, :40] = kv[:17, 0], kv[17:, 0]
    padded = {"q": q[..., :r], "kv_cache": full[..., :r], "seq_lens": lens, "q_pe": q[..., r:],
              "k_pe": full[..., r:]}  # fmt: skip
    padded = {k: v.contiguous() for k, v in padded.items()}
    out = fn(**packed, **tuning)
    torch.testing.assert_close(fn(**padded, **tuning), out, atol=0, rtol=0)
    _check(out, mod.reference(**padded), torch.bfloat16)
    # padded without seq_lens: every entry uses all T rows
    whole = fn(**dict(padded, seq_lens=torch.full((3,), 45, dtype=torch.int32)), **tuning)
    torch.testing.assert_close(fn(**dict(padded, seq_lens=None), **tuning), whole, atol=0, rtol=0)


def test_mla_split_check_inputs_and_clipped_lengths(load_kernel):
    mod = load_kernel(_path("mla_decode_attention_split"))
    inputs = mod.make_inputs(MLA_SPLIT[0], torch.float32)
    mod.check_inputs(inputs["kv_cache"], inputs["seq_lens"])
    too_long = torch.tensor([37, 5, 23], dtype=torch.int32)
    with pytest.raises(ValueError, match="sum"):
        mod.check_inputs(inputs["kv_cache"], too_long)
    with pytest.raises(ValueError, match="negative"):
        mod.check_inputs(inputs["kv_cache"], torch.tensor([37, -1, 20], dtype=torch.int32))
    # the kernels clip the last sequence to the cache's rows instead of reading past them
    out = mod.mla_decode_attention_split(**dict(inputs, seq_lens=too_long), block_n=16)
    _check(out, mod.reference(**inputs), torch.float32)
    padded = mod.make_inputs(MLA_SPLIT[4], torch.float32)
    mod.check_inputs(padded["kv_cache"], padded["seq_lens"], padded=True)
    with pytest.raises(ValueError, match="longest"):
        mod.check_inputs(padded["kv_cache"], padded["seq_lens"] + 1, padded=True)
    with pytest.raises(ValueError, match="seq_lens"):  # the packed layout cannot go without
        mod.mla_decode_attention_split(**dict(inputs, seq_lens=None))
    with pytest.raises(ValueError, match="q_pe and k_pe"):
        mod.mla_decode_attention_split(**dict(padded, k_pe=None))


@pytest.mark.parametrize("kernel_id", list(KERNEL_CASES))
def test_attention_k1_rejects_mismatched_head_dim(load_kernel, kernel_id):
    mod = load_kernel(_path(kernel_id))
    inputs = mod.make_inputs(KERNEL_CASES[kernel_id][0][0], torch.float32)
    first = next(iter(inputs))  # the query tensor in every launcher
    inputs[first] = inputs[first][..., :-1].contiguous()
    with pytest.raises(ValueError, match="q"):
        getattr(mod, kernel_id)(**inputs)


def test_attention_k1_headers_name_their_file_and_launcher():
    for kernel_id in KERNEL_CASES:
        path = KERNELS / _path(kernel_id)
        meta, _ = kernel_header(path.read_text(), source=str(path))
        assert meta["id"] == Path(path).stem == meta["launcher"]
