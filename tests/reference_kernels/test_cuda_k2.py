"""CUDA C++ reference kernels (k2 set): headers parse on the CPU; results match on the GPU.

The GPU tests build each extension with load_inline (nvcc, about a minute per kernel the first
time) and compare the launcher with the file's own ``reference()``: elementwise with per-dtype
tolerances and over the whole output (relative L2 error), so a zero or constant output fails.
"""

import ast
from pathlib import Path

import pytest
import torch

from aka.kb import load_kernels

KERNELS_ROOT = Path(__file__).resolve().parents[2] / "reference_kernels"
CUDA_ROOT = KERNELS_ROOT / "cuda"
KERNELS = {
    "norm/layer_norm_welford_warp_cuda": [
        {"rows": 1, "hidden": 1152},
        {"rows": 37, "hidden": 1000},
        {"rows": 130, "hidden": 7},
    ],
    "norm/l2_norm_block_cuda": [
        {"rows": 1, "hidden": 2048},
        {"rows": 33, "hidden": 1000},
        {"rows": 5, "hidden": 3},
    ],
    "norm/gated_rms_norm_warp_cuda": [
        {"rows": 37, "hidden": 128},
        {"rows": 5, "hidden": 96, "norm_before_gate": False, "activation": "sigmoid"},
        {"rows": 9, "hidden": 33, "norm_before_gate": False, "activation": "silu"},
    ],
    "norm/fused_qk_rmsnorm_warp_per_head_cuda": [
        {"tokens": 1, "heads": 32, "kv_heads": 8, "head_dim": 128},
        {"tokens": 7, "heads": 5, "kv_heads": 1, "head_dim": 96},
        {"tokens": 3, "heads": 2, "kv_heads": 2, "head_dim": 17},
    ],
    "quantization/per_token_group_quant_fp8_warp_cuda": [
        {"tokens": 1, "hidden": 7168},
        {"tokens": 7, "hidden": 320, "group_size": 64},
        {"tokens": 4, "hidden": 300},
    ],
    "quantization/rms_norm_quant_fp8_block_cuda": [
        {"tokens": 1, "hidden": 2048},
        {"tokens": 33, "hidden": 1000},
        {"tokens": 4, "hidden": 13},
    ],
    "moe/moe_sum_reduce_vec_cuda": [
        {"tokens": 64, "top_k": 8, "hidden": 2048},
        {"tokens": 7, "top_k": 3, "hidden": 200},
        {"tokens": 5, "top_k": 8, "hidden": 97, "factor": 2.5},
    ],
    "moe/moe_topk_gating_softmax_warp_cuda": [
        {"tokens": 3, "experts": 128, "top_k": 8},
        {"tokens": 7, "experts": 24, "top_k": 5},
        {"tokens": 65, "experts": 256, "top_k": 8},
    ],
    "activation/gelu_and_mul_vec_cuda": [
        {"rows": 1, "d": 16384},
        {"rows": 33, "d": 1000},
        {"rows": 5, "d": 13},
    ],
    "embedding/embedding_gather_vec_cuda": [
        {"tokens": 1, "vocab": 32000, "hidden": 4096},
        {"tokens": 37, "vocab": 1000, "hidden": 1000, "id_dtype": "int64"},
        {"tokens": 9, "vocab": 50, "hidden": 7},
    ],
}
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}
#: Relative L2 error of the whole output allowed per dtype (a zero output scores 1.0).
NORM_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _assert_close(out, ref, dtype):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        if not o.is_floating_point():
            assert torch.equal(o, r)
            continue
        of, rf = o.float(), r.float()
        if o.dtype == torch.float8_e4m3fn:  # one e4m3 step is 2^-3 relative
            torch.testing.assert_close(of, rf, atol=2.0**-9, rtol=0.125)
            rel = torch.linalg.vector_norm(of - rf) / torch.linalg.vector_norm(rf).clamp_min(1e-30)
            assert rel <= 2e-2, f"fp8 relative L2 error {rel:.3g}"
            continue
        tol = TOL[o.dtype] if o.dtype in TOL else TOL[dtype]
        torch.testing.assert_close(of, rf, **tol)
        rel = torch.linalg.vector_norm(of - rf) / torch.linalg.vector_norm(rf).clamp_min(1e-30)
        assert rel <= NORM_TOL.get(o.dtype, NORM_TOL[dtype]), f"relative L2 error {rel:.3g}"


def test_cuda_k2_kernel_headers_parse_and_declare_helpers():
    """Each k2 file is a valid CUDA kernel with launcher, reference and make_inputs, unbuilt."""
    kernels, problems = load_kernels(KERNELS_ROOT)  # the root: paths are checked as dsl/family
    mine = {str(CUDA_ROOT / f"{rel}.py") for rel in KERNELS}
    assert [p for p in problems if any(path in p for path in mine)] == []
    found = {str(k.path): k for k in kernels if str(k.path) in mine}
    assert set(found) == mine
    for kernel in found.values():
        assert kernel.meta.dsl.value == "cuda"
        assert kernel.meta.id == kernel.path.stem
        tree = ast.parse(kernel.text)
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {kernel.meta.launcher, "reference", "make_inputs", "_extension"} <= functions
        strings = {
            n.targets[0].id: n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign)
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant)
        }
        assert "__global__" in strings["_CUDA_KERNELS"]
        assert "#include <torch/" not in strings["_CUDA_KERNELS"]  # compiles without torch
        assert "#include <torch/extension.h>" in strings["_CUDA_HOST"]
        extension = next(n for n in tree.body if getattr(n, "name", "") == "_extension")
        assert "load_inline(" in ast.get_source_segment(kernel.text, extension)
        # every launch function the C++ declares is exported by load_inline
        declared = strings["_CPP_DECL"].split("(")[0].split()[-1]
        assert f'functions=["{declared}"]' in ast.get_source_segment(kernel.text, extension)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("relpath", list(KERNELS))
def test_cuda_k2_kernel_matches_reference(load_kernel, relpath, case, dtype):
    mod = load_kernel(f"cuda/{relpath}.py")
    inputs = mod.make_inputs(KERNELS[relpath][case], dtype, device="cuda")
    ref = mod.reference(**inputs)
    out = getattr(mod, Path(relpath).name)(**inputs)
    torch.cuda.synchronize()
    _assert_close(out, ref, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_moe_topk_gating_ids_are_exact_and_descending(load_kernel, dtype):
    mod = load_kernel("cuda/moe/moe_topk_gating_softmax_warp_cuda.py")
    inputs = mod.make_inputs({"tokens": 65, "experts": 256, "top_k": 8}, dtype, device="cuda")
    weights, ids = mod.moe_topk_gating_softmax_warp_cuda(**inputs)
    assert torch.equal(ids, mod.reference(**inputs)[1])
    assert bool((weights[:, :-1] >= weights[:, 1:]).all())


# --- input validation: one per kernel --------------------------------------------------------


def _dev(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda").to(dtype)


@pytest.mark.gpu
def test_layer_norm_welford_rejects_bias_of_wrong_width(load_kernel):
    mod = load_kernel("cuda/norm/layer_norm_welford_warp_cuda.py")
    with pytest.raises(ValueError, match="bias must be"):
        mod.layer_norm_welford_warp_cuda(_dev(4, 64), _dev(64), _dev(63))


@pytest.mark.gpu
def test_l2_norm_block_rejects_threads_not_power_of_two(load_kernel):
    mod = load_kernel("cuda/norm/l2_norm_block_cuda.py")
    with pytest.raises(ValueError, match="power of two"):
        mod.l2_norm_block_cuda(_dev(4, 64), threads=96)


@pytest.mark.gpu
def test_gated_rms_norm_rejects_unknown_activation(load_kernel):
    mod = load_kernel("cuda/norm/gated_rms_norm_warp_cuda.py")
    with pytest.raises(ValueError, match="activation must be"):
        mod.gated_rms_norm_warp_cuda(_dev(4, 64), _dev(64), _dev(4, 64), activation="gelu")


@pytest.mark.gpu
def test_fused_qk_rmsnorm_rejects_width_not_matching_heads(load_kernel):
    mod = load_kernel("cuda/norm/fused_qk_rmsnorm_warp_per_head_cuda.py")
    with pytest.raises(ValueError, match="width must be"):
        mod.fused_qk_rmsnorm_warp_per_head_cuda(_dev(2, 5 * 64), _dev(64), _dev(64), 4, 1)


@pytest.mark.gpu
def test_per_token_group_quant_rejects_oversized_group(load_kernel):
    mod = load_kernel("cuda/quantization/per_token_group_quant_fp8_warp_cuda.py")
    with pytest.raises(ValueError, match="group_size must be"):
        mod.per_token_group_quant_fp8_warp_cuda(_dev(2, 4096), group_size=2048)


@pytest.mark.gpu
def test_rms_norm_quant_rejects_residual_of_other_dtype(load_kernel):
    mod = load_kernel("cuda/quantization/rms_norm_quant_fp8_block_cuda.py")
    with pytest.raises(ValueError, match="residual must be"):
        mod.rms_norm_quant_fp8_block_cuda(_dev(2, 64), _dev(2, 64, dtype=torch.float16), _dev(64))


@pytest.mark.gpu
def test_moe_sum_reduce_rejects_2d_input(load_kernel):
    mod = load_kernel("cuda/moe/moe_sum_reduce_vec_cuda.py")
    with pytest.raises(ValueError, match="expert_outputs must be"):
        mod.moe_sum_reduce_vec_cuda(_dev(8, 64))


@pytest.mark.gpu
def test_moe_topk_gating_rejects_top_k_above_experts(load_kernel):
    mod = load_kernel("cuda/moe/moe_topk_gating_softmax_warp_cuda.py")
    with pytest.raises(ValueError, match="top_k must be"):
        mod.moe_topk_gating_softmax_warp_cuda(_dev(2, 8, dtype=torch.float32), top_k=9)


@pytest.mark.gpu
def test_gelu_and_mul_rejects_odd_width(load_kernel):
    mod = load_kernel("cuda/activation/gelu_and_mul_vec_cuda.py")
    with pytest.raises(ValueError, match="even"):
        mod.gelu_and_mul_vec_cuda(_dev(2, 63))


@pytest.mark.gpu
def test_embedding_gather_rejects_float_ids(load_kernel):
    mod = load_kernel("cuda/embedding/embedding_gather_vec_cuda.py")
    with pytest.raises(ValueError, match="ids must be"):
        mod.embedding_gather_vec_cuda(_dev(3, dtype=torch.float32), _dev(10, 8))
