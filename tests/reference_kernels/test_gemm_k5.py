"""GEMM and MoE reference kernels (k5 set) against their PyTorch references, interpreted."""

from dataclasses import dataclass, field

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL
from tests.reference_kernels.refill import refilled_inputs

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL
F32_BF16 = (torch.float32, torch.bfloat16)


@dataclass
class Kernel:
    """One kernel under test: its family folder, smoke cases and tuning extremes."""

    family: str
    cases: list[tuple[dict, dict]]  # (make_inputs shape, tuning for that case)
    extremes: list[dict]  # first and last value of every tuning list in the header
    dtypes: tuple[torch.dtype, ...] = F32_BF16
    extreme_case: int = 0  # the case the extremes run on
    extreme_dtype: torch.dtype = torch.float32
    tol: dict = field(default_factory=dict)  # dtype -> (atol, rtol) overrides
    launcher: str = ""  # the launcher's name when it is not the file stem


KERNELS = {
    "gemm_residual_add_epilogue": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 72}, {}),
         ({"m": 1, "n": 17, "k": 200}, {}),
         ({"m": 70, "n": 20, "k": 16}, {"block_m": 32, "group_m": 1})],
        [{"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 16, "num_warps": 8,
          "num_stages": 4}],
    ),
    "gate_up_silu_mul_fused": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 72}, {}),
         ({"m": 1, "n": 17, "k": 100}, {}),
         ({"m": 40, "n": 70, "k": 16}, {"block_m": 16, "block_n": 32, "group_m": 1})],
        [{"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 1, "num_warps": 8,
          "num_stages": 4}],
    ),
    "gemv_split_k_m1": Kernel(
        "gemm",
        [({"n": 40, "k": 1000}, {}),
         ({"n": 17, "k": 200}, {"split_k": 3, "block_k": 64}),
         ({"n": 100, "k": 33}, {"split_k": 8})],  # more splits than K blocks: empty slices
        [{"split_k": 4, "block_n": 32, "block_k": 256, "num_warps": 4},
         {"split_k": 16, "block_n": 64, "block_k": 512, "num_warps": 8}],
    ),
    "gemm_w8a8_int8_per_token_channel": Kernel(
        "gemm",
        # case 0 splits K (int32 atomics + dequant kernel); case 2 uses the fused epilogue
        [({"m": 5, "n": 40, "k": 300}, {}),
         ({"m": 33, "n": 70, "k": 64}, {"split_k": 2, "block_k": 32}),
         ({"m": 40, "n": 96, "k": 96}, {"split_k": 1, "group_m": 2, "block_m": 16})],
        [{"split_k": 1, "block_m": 32, "block_n": 64, "block_k": 64, "group_m": 8,
          "num_warps": 4, "num_stages": 3},
         {"split_k": 8, "block_m": 128, "block_n": 128, "block_k": 128, "group_m": 4,
          "num_warps": 8, "num_stages": 4}],
        dtypes=(torch.int8,),
        extreme_dtype=torch.int8,
    ),
    "gemm_fp32_tf32_precision_switch": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 72}, {}),
         ({"m": 1, "n": 17, "k": 200}, {"input_precision": "ieee"}),
         ({"m": 70, "n": 20, "k": 16}, {"input_precision": "tf32", "block_m": 32})],
        [{"input_precision": "tf32x3", "block_m": 64, "block_n": 64, "block_k": 32,
          "group_m": 8, "num_warps": 4, "num_stages": 3},
         {"input_precision": "tf32", "block_m": 128, "block_n": 128, "block_k": 64,
          "group_m": 1, "num_warps": 8, "num_stages": 4}],
        dtypes=(torch.float32,),
    ),
    "gemm_tensor_descriptor_sm90": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 72}, {"block_m": 64, "block_n": 32, "block_k": 32}),
         ({"m": 1, "n": 16, "k": 200}, {"block_n": 16}),
         ({"m": 70, "n": 24, "k": 16}, {"block_m": 64, "block_n": 16, "block_k": 16})],
        [{"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8,
          "num_stages": 3},
         {"block_m": 64, "block_n": 256, "block_k": 128, "group_m": 1, "num_warps": 4,
          "num_stages": 4}],
    ),
    "block_scaled_mm_fp8_persistent": Kernel(
        "gemm",
        # the atrex30 smoke shapes; case 0 has 8 tiles on 4 CPU programs: each loops twice
        [({"m": 37, "n": 200, "k": 320}, {"block_m": 32, "block_n": 64}),
         ({"m": 5, "n": 96, "k": 192, "group_n": 32, "group_k": 64}, {}),
         ({"m": 20, "n": 48, "k": 100, "group_n": 16, "group_k": 32},
          {"block_k": 16, "block_n": 16, "block_m": 16})],
        [{"block_m": 64, "block_n": 128, "block_k": 128, "group_m": 8, "programs_per_sm": 1,
          "num_warps": 4, "num_stages": 3},
         {"block_m": 128, "block_n": 64, "block_k": 64, "group_m": 1, "programs_per_sm": 2,
          "num_warps": 8, "num_stages": 4}],
        dtypes=(torch.float8_e4m3fn,),
        extreme_dtype=torch.float8_e4m3fn,
        # Hopper's fp8 MMA keeps fewer accumulator bits than fp32 (DeepSeek-V3 technical report):
        # a 128-deep K step is off by ~1e-4 relative on the H200
        tol={torch.float32: (2e-2, 2e-3) if ON_GPU else (1e-3, 1e-4)},
    ),
    "fused_moe_decode_expert_stationary": Kernel(
        "moe",
        # the atrex30 fused_moe smoke shapes, then 40 pairs in chunks of 16 (three chunks)
        [({"tokens": 13, "hidden": 96, "inter": 40, "experts": 6, "top_k": 2}, {}),
         ({"tokens": 7, "hidden": 72, "inter": 24, "experts": 5, "top_k": 3}, {}),
         ({"tokens": 20, "hidden": 64, "inter": 32, "experts": 4, "top_k": 2},
          {"block_p": 16, "block_k": 32})],
        [{"block_p": 16, "block_n": 32, "block_k": 64, "num_warps": 4},
         {"block_p": 64, "block_n": 64, "block_k": 128, "num_warps": 8}],
    ),
    "moe_topk_sigmoid_grouped_bias": Kernel(
        "moe",
        [({"tokens": 5, "experts": 64, "groups": 8, "topk_group": 4, "top_k": 8}, {}),
         ({"tokens": 3, "experts": 24, "groups": 3, "topk_group": 2, "top_k": 5,
           "renormalize": False, "scale": 1.0}, {}),
         ({"tokens": 4, "experts": 20, "groups": 4, "topk_group": 1, "top_k": 3}, {})],
        [{"num_warps": 2}, {"num_warps": 8}],
    ),
    "moe_grouped_gemm_expert_major": Kernel(
        "moe",
        [({"tokens": 10, "k_dim": 48, "n": 40, "experts": 4, "top_k": 2, "block_size": 16,
           "weighted": True}, {}),
         ({"tokens": 3, "k_dim": 100, "n": 20, "experts": 8, "top_k": 1, "block_size": 16}, {}),
         ({"tokens": 20, "k_dim": 32, "n": 70, "experts": 3, "top_k": 3, "block_size": 32,
           "weighted": True}, {"block_n": 32, "block_k": 32})],
        [{"block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 3},
         {"block_n": 128, "block_k": 128, "num_warps": 8, "num_stages": 4}],
    ),
    "moe_permute_unpermute": Kernel(
        "moe",
        [({"tokens": 9, "hidden": 100, "experts": 5, "top_k": 2}, {}),
         ({"tokens": 1, "hidden": 64, "experts": 3, "top_k": 3}, {}),
         ({"tokens": 30, "hidden": 1030, "experts": 8, "top_k": 2}, {"block_h": 256})],
        [{"block_r": 4, "block_h": 512, "num_warps": 4},
         {"block_r": 8, "block_h": 1024, "num_warps": 8}],
        launcher="moe_permute",
    ),
    "lora_shrink_expand_sgmv": Kernel(
        "gemm",
        # an unused adapter (-1), one-token segments, an empty segment
        [({"seg_lens": [5, 20, 3], "adapter_ids": [1, 0, -1], "hi": 64, "ho": 48, "rank": 8,
           "loras": 2}, {}),
         ({"seg_lens": [1, 1, 1, 1], "adapter_ids": [0, 2, 2, 1], "hi": 40, "ho": 100,
           "rank": 16, "loras": 3}, {}),
         ({"seg_lens": [33, 0, 7], "adapter_ids": [0, 1, 1], "hi": 96, "ho": 40, "rank": 24,
           "loras": 2}, {"block_m": 32, "block_k": 32})],
        [{"block_m": 16, "block_n": 64, "block_k": 64, "num_warps": 4},
         {"block_m": 64, "block_n": 128, "block_k": 128, "num_warps": 8}],
        extreme_case=2,
    ),
}  # fmt: skip

CASES = [
    (name, i, dtype)
    for name, kernel in KERNELS.items()
    for i in range(len(kernel.cases))
    for dtype in kernel.dtypes
]


def _check(out, ref, tol=None) -> None:
    """Elementwise and whole-output checks at the output dtype's tolerance."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs, strict=True):
        atol, rtol = (tol or {}).get(r.dtype, TOL.get(r.dtype, (0, 0)))
        assert o.dtype == r.dtype and o.shape == r.shape
        if not r.is_floating_point():
            assert torch.equal(o, r)
            continue
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol
        assert r.float().norm() > 0


def _clone(inputs: dict) -> dict:
    """Copy the tensor inputs, for a reference that updates an input in place as its kernel."""
    return {k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()}


def _module(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name].family}/{name}.py")


def _launcher(mod, name):
    return getattr(mod, KERNELS[name].launcher or name)


@pytest.mark.parametrize(("name", "case", "dtype"), CASES, ids=str)
def test_kernel_matches_reference(load_kernel, name, case, dtype):
    mod = _module(load_kernel, name)
    shape, tuning = KERNELS[name].cases[case]
    inputs = mod.make_inputs(shape, dtype)
    ref = mod.reference(**_clone(inputs))  # on copies: some update an input in place
    _check(_launcher(mod, name)(**inputs, **tuning), ref, KERNELS[name].tol)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, name, which):
    mod = _module(load_kernel, name)
    kernel = KERNELS[name]
    shape, _ = kernel.cases[kernel.extreme_case]
    inputs = mod.make_inputs(shape, kernel.extreme_dtype)
    ref = mod.reference(**_clone(inputs))
    _check(_launcher(mod, name)(**inputs, **kernel.extremes[which]), ref, kernel.tol)


BAD_INPUTS = {
    "gemm_residual_add_epilogue": (
        (torch.zeros(3, 8), torch.zeros(5, 8), torch.zeros(3, 4)), "residual"),
    "gate_up_silu_mul_fused": ((torch.zeros(3, 8), torch.zeros(5, 8)), "even row count"),
    "gemv_split_k_m1": ((torch.zeros(2, 8), torch.zeros(5, 8)), "single row"),
    "gemm_w8a8_int8_per_token_channel": (
        (torch.zeros(4, 8, dtype=torch.int8), torch.zeros(5, 8, dtype=torch.int8),
         torch.ones(4), torch.ones(5, 1)),
        "b_scale",
    ),
    "gemm_fp32_tf32_precision_switch": (
        (torch.zeros(3, 8, dtype=torch.bfloat16), torch.zeros(5, 8, dtype=torch.bfloat16)),
        "fp32 A and B",
    ),
    "gemm_tensor_descriptor_sm90": ((torch.zeros(3, 10), torch.zeros(8, 10)), "16-byte"),
    "block_scaled_mm_fp8_persistent": (
        (torch.zeros(4, 128, dtype=torch.float8_e4m3fn),
         torch.zeros(8, 128, dtype=torch.float8_e4m3fn), torch.ones(4, 2), torch.ones(1, 1)),
        "a_scales",
    ),
    "fused_moe_decode_expert_stationary": (
        (torch.zeros(2, 8), torch.zeros(3, 6, 8), torch.zeros(3, 8, 4), torch.ones(2, 1),
         torch.zeros(2, 1, dtype=torch.int32)),
        "need w1",
    ),
    "moe_topk_sigmoid_grouped_bias": ((torch.zeros(2, 10), torch.zeros(10), 2, 3, 1),
                                      "num_expert_group"),
    "moe_grouped_gemm_expert_major": (
        (torch.zeros(2, 8), torch.zeros(2, 4, 8), torch.zeros(20, dtype=torch.int32),
         torch.zeros(1, dtype=torch.int32), torch.tensor([16], dtype=torch.int32), 1, 16),
        "multiple of block_size",
    ),
    "moe_permute_unpermute": ((torch.zeros(3, 8), torch.zeros(2, 2, dtype=torch.int32), 4),
                              "need hidden"),
    "lora_shrink_expand_sgmv": (
        (torch.zeros(4, 8), torch.zeros(4, 6), torch.zeros(2, 4, 8), torch.zeros(2, 6, 5),
         torch.tensor([0, 4], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
        "lora_b",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_rejects_bad_inputs(load_kernel, name):
    mod = _module(load_kernel, name)
    args, message = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message):
        _launcher(mod, name)(*args)


def test_moe_unpermute_inverts_permute_with_weights(load_kernel):
    mod = _module(load_kernel, "moe_permute_unpermute")
    inputs = mod.make_inputs({"tokens": 9, "hidden": 100, "experts": 5, "top_k": 3},
                             torch.bfloat16)  # fmt: skip
    permuted, dest, offsets = mod.moe_permute(**inputs)
    # every expert's run holds only its own pairs
    flat = inputs["topk_ids"].reshape(-1)
    for e in range(5):
        assert (flat[(dest.long()[:, None] == torch.arange(offsets[e], offsets[e + 1])).any(1)]
                == e).all()  # fmt: skip
    weights = torch.softmax(torch.randn(9, 3), -1)
    expert_out = permuted * 2  # a stand-in expert: scale by 2
    out = mod.moe_unpermute(expert_out, dest, weights, 1.5)
    _check(out, mod.reference_unpermute(expert_out, dest, weights, 1.5))
    direct = (inputs["hidden"].float() * 3.0).to(torch.bfloat16)  # 1.5 * 2 * sum(w) = 3
    _check(out, direct)


def test_moe_grouped_gemm_refilled_inputs_give_the_new_answer(load_kernel):
    # the scorer refills the inputs with another seed's values at the same addresses: the
    # aligned buffers have their worst-case length, so any routing fits them
    name = "moe_grouped_gemm_expert_major"
    mod = _module(load_kernel, name)
    shape = {"tokens": 10, "k_dim": 48, "n": 40, "experts": 4, "top_k": 2, "block_size": 16,
             "weighted": True}  # fmt: skip
    first, second = refilled_inputs(mod, shape, torch.float32)
    _check(_launcher(mod, name)(**first), mod.reference(**second))


def test_lora_sgmv_checks_seg_starts_on_host_and_runs_without_max_seg_len(load_kernel):
    name = "lora_shrink_expand_sgmv"
    mod = _module(load_kernel, name)
    shape, _ = KERNELS[name].cases[2]
    inputs = mod.make_inputs(shape, torch.float32)
    mod.check_inputs(inputs["seg_starts"], 33)
    with pytest.raises(ValueError, match="max_seg_len"):
        mod.check_inputs(inputs["seg_starts"], 32)
    with pytest.raises(ValueError, match="non-decreasing"):
        mod.check_inputs(torch.tensor([0, 5, 3], dtype=torch.int32))
    # without max_seg_len the grid spans all T rows; programs past a segment's end return
    ref = mod.reference(**_clone(inputs))
    _check(mod.lora_shrink_expand_sgmv(**{**inputs, "max_seg_len": None}), ref)


def test_moe_permute_checks_ids_on_host_and_drops_bad_pairs(load_kernel):
    mod = _module(load_kernel, "moe_permute_unpermute")
    ids = torch.tensor([[2, 0], [5, 2], [1, -1]], dtype=torch.int32)
    mod.check_inputs(ids.clamp(0, 2), 3)
    with pytest.raises(ValueError, match="num_experts = 3"):
        mod.check_inputs(ids, 3)
    hidden = torch.randn(3, 40)
    permuted, dest, offsets = mod.moe_permute(hidden, ids, 3)
    # the two bad pairs are dropped (dest -1); the rest are stably sorted by expert
    assert dest.tolist() == [2, 0, -1, 3, 1, -1] and offsets.tolist() == [0, 1, 2, 4]
    assert torch.equal(permuted[:4], hidden[[0, 2, 0, 1]])
    out = mod.moe_unpermute(permuted, dest, torch.ones(3, 2), 1.0)
    assert torch.equal(out, hidden * torch.tensor([[2.0], [1.0], [1.0]]))
