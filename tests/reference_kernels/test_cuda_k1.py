"""CUDA C++ reference kernels (k1 set): headers parse on the CPU; results match on the GPU.

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
    "norm/rms_norm_warp_per_row_cuda": [
        {"rows": 1, "hidden": 4096},
        {"rows": 37, "hidden": 1000},
        {"rows": 130, "hidden": 129},
    ],
    "norm/fused_add_rms_norm_block_cuda": [
        {"rows": 1, "hidden": 8192},
        {"rows": 33, "hidden": 1000},
        {"rows": 7, "hidden": 31},
    ],
    "activation/silu_and_mul_vec8_cuda": [
        {"rows": 1, "d": 14336},
        {"rows": 33, "d": 1000},
        {"rows": 5, "d": 13},
    ],
    "softmax/softmax_online_warp_cuda": [
        {"rows": 1, "cols": 32000},
        {"rows": 77, "cols": 1000},
        {"rows": 9, "cols": 7},
    ],
    "quantization/per_token_quant_fp8_cuda": [
        {"rows": 1, "hidden": 7168},
        {"rows": 33, "hidden": 1000},
        {"rows": 4, "hidden": 13},
    ],
    "rope/rope_neox_inplace_cuda": [
        {"tokens": 1, "heads": 32, "kv_heads": 8, "head_dim": 128},
        {"tokens": 37, "heads": 6, "kv_heads": 2, "head_dim": 64, "rot_dim": 32},
        {"tokens": 5, "heads": 3, "kv_heads": 3, "head_dim": 40},
    ],
    "moe/moe_align_block_size_cuda": [
        {"tokens": 1, "top_k": 8, "num_experts": 128, "block_size": 128},
        {"tokens": 11, "top_k": 4, "num_experts": 9, "block_size": 8},
        {"tokens": 3000, "top_k": 8, "num_experts": 64, "block_size": 16},
    ],
    "sampling/argmax_rowwise_cuda": [
        {"rows": 1, "vocab": 151936},
        {"rows": 33, "vocab": 1000},
        {"rows": 3, "vocab": 5},
    ],
    "cache/reshape_and_cache_cuda": [
        {"tokens": 1, "heads": 8, "head_dim": 128},
        {"tokens": 33, "heads": 3, "head_dim": 40},
        {"tokens": 17, "heads": 2, "head_dim": 3, "block_size": 8},
    ],
    "gemm/gemv_bf16_warp_cuda": [
        {"n": 4096, "k": 4096},
        {"n": 1000, "k": 1000},
        {"n": 33, "k": 13},
    ],
}
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}
#: Relative L2 error of the whole output allowed per dtype (a zero output scores 1.0).
NORM_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _clones(inputs):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _call(mod, relpath, inputs):
    """Run the launcher on clones: in-place kernels (and their references) update their inputs."""
    return getattr(mod, Path(relpath).name)(**_clones(inputs))


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
            continue
        torch.testing.assert_close(of, rf, **TOL[dtype])
        rel = torch.linalg.vector_norm(of - rf) / torch.linalg.vector_norm(rf).clamp_min(1e-30)
        assert rel <= NORM_TOL[dtype], f"relative L2 error {rel:.3g}"


def test_cuda_kernel_headers_parse_and_declare_helpers():
    """Every file under reference_kernels/cuda is a valid CUDA kernel with its helpers, unbuilt."""
    kernels, problems = load_kernels(KERNELS_ROOT)  # the root: paths are checked as dsl/family
    assert [p for p in problems if str(CUDA_ROOT) in p] == []
    kernels = [k for k in kernels if k.path.is_relative_to(CUDA_ROOT)]
    # this file's kernels are all there (other test files cover the other CUDA kernels)
    assert {k.path.relative_to(CUDA_ROOT).with_suffix("").as_posix() for k in kernels} >= set(
        KERNELS
    )
    for kernel in kernels:
        assert kernel.meta.dsl.value == "cuda"
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
        assert "load_inline(" in ast.get_source_segment(
            kernel.text, next(n for n in tree.body if getattr(n, "name", "") == "_extension")
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("relpath", list(KERNELS))
def test_cuda_kernel_matches_reference(load_kernel, relpath, case, dtype):
    mod = load_kernel(f"cuda/{relpath}.py")
    shape = KERNELS[relpath][case]
    inputs = mod.make_inputs(shape, dtype, device="cuda")
    ref = mod.reference(**_clones(inputs))
    out = _call(mod, relpath, inputs)
    torch.cuda.synchronize()
    _assert_close(out, ref, dtype)


@pytest.mark.gpu
def test_rms_norm_warp_rejects_weight_of_other_dtype(load_kernel):
    mod = load_kernel("cuda/norm/rms_norm_warp_per_row_cuda.py")
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="weight must be"):
        mod.rms_norm_warp_per_row_cuda(x, torch.ones(64, device="cuda"))


@pytest.mark.gpu
def test_fused_add_rms_norm_rejects_non_power_of_two_threads(load_kernel):
    mod = load_kernel("cuda/norm/fused_add_rms_norm_block_cuda.py")
    inputs = mod.make_inputs({"rows": 2, "hidden": 64}, torch.float32)
    with pytest.raises(ValueError, match="power of two"):
        mod.fused_add_rms_norm_block_cuda(**inputs, threads=96)


@pytest.mark.gpu
def test_silu_and_mul_rejects_odd_last_dim(load_kernel):
    mod = load_kernel("cuda/activation/silu_and_mul_vec8_cuda.py")
    with pytest.raises(ValueError, match="even"):
        mod.silu_and_mul_vec8_cuda(torch.randn(3, 7, device="cuda"))


@pytest.mark.gpu
def test_softmax_rejects_cpu_tensor(load_kernel):
    mod = load_kernel("cuda/softmax/softmax_online_warp_cuda.py")
    with pytest.raises(ValueError, match="CUDA"):
        mod.softmax_online_warp_cuda(torch.randn(3, 7, device="cpu"))


@pytest.mark.gpu
def test_per_token_quant_rejects_3d_input(load_kernel):
    mod = load_kernel("cuda/quantization/per_token_quant_fp8_cuda.py")
    with pytest.raises(ValueError, match="2-D"):
        mod.per_token_quant_fp8_cuda(torch.randn(2, 3, 16, device="cuda"))


@pytest.mark.gpu
def test_rope_rejects_odd_rot_dim(load_kernel):
    mod = load_kernel("cuda/rope/rope_neox_inplace_cuda.py")
    inputs = mod.make_inputs(
        {"tokens": 2, "heads": 2, "kv_heads": 1, "head_dim": 16}, torch.float32
    )
    inputs["cos_sin_cache"] = inputs["cos_sin_cache"][:, :15]
    with pytest.raises(ValueError, match="rot_dim"):
        mod.rope_neox_inplace_cuda(**inputs)


@pytest.mark.gpu
def test_moe_align_rejects_int64_ids(load_kernel):
    mod = load_kernel("cuda/moe/moe_align_block_size_cuda.py")
    ids = torch.zeros(4, 2, dtype=torch.int64, device="cuda")
    with pytest.raises(ValueError, match="int32"):
        mod.moe_align_block_size_cuda(ids, 16, 8)


@pytest.mark.gpu
def test_argmax_prefers_nan_and_lowest_index(load_kernel):
    # torch.argmax semantics: NaN is the largest value; ties go to the lowest index
    mod = load_kernel("cuda/sampling/argmax_rowwise_cuda.py")
    logits = torch.zeros(2, 3000, device="cuda")
    logits[0, [5, 2000]] = 3.0
    logits[1, [7, 2500]] = float("nan")
    assert mod.argmax_rowwise_cuda(logits).tolist() == [5, 7]
    with pytest.raises(ValueError, match="threads"):
        mod.argmax_rowwise_cuda(logits, threads=48)


@pytest.mark.gpu
def test_reshape_and_cache_rejects_strided_cache(load_kernel):
    mod = load_kernel("cuda/cache/reshape_and_cache_cuda.py")
    inputs = mod.make_inputs({"tokens": 2, "heads": 2, "head_dim": 8}, torch.float32)
    inputs["key_cache"] = inputs["key_cache"].transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        mod.reshape_and_cache_cuda(**inputs)


@pytest.mark.gpu
def test_gemv_rejects_batched_input(load_kernel):
    mod = load_kernel("cuda/gemm/gemv_bf16_warp_cuda.py")
    w = torch.randn(8, 16, device="cuda")
    with pytest.raises(ValueError, match="M = 1"):
        mod.gemv_bf16_warp_cuda(torch.randn(2, 16, device="cuda"), w)
