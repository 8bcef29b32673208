import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

GEMMS = ["gemm_tiled", "gemm_grouped_swizzle", "gemm_split_k"]
CASES = [{"m": 33, "n": 48, "k": 96}, {"m": 1, "n": 17, "k": 200}, {"m": 65, "n": 130, "k": 16}]
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1e-2)}
if ON_GPU:  # fp32 tl.dot runs on TF32 tensor cores there
    TOL[torch.float32] = TF32_TOL
# first and last value of every tuning list, per launcher (the header's declared space)
EXTREMES = {
    "gemm_tiled": [
        {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 3},
        {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 4},
        {"block_m": 32, "block_n": 32, "block_k": 16, "num_warps": 2, "num_stages": 2},
    ],
    "gemm_grouped_swizzle": [
        {"group_m": 8, "block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8,
         "num_stages": 3},
        {"group_m": 16, "block_m": 64, "block_n": 256, "block_k": 32, "num_warps": 4,
         "num_stages": 4},
        {"group_m": 1, "block_m": 64, "block_n": 64, "block_k": 32},
    ],
    "gemm_split_k": [
        {"split_k": 4, "block_m": 16, "block_n": 64, "block_k": 128, "num_warps": 4,
         "num_stages": 4},
        {"split_k": 16, "block_m": 64, "block_n": 128, "block_k": 256, "num_warps": 8,
         "num_stages": 3},
        {"split_k": 1, "block_m": 32, "block_n": 32, "block_k": 64, "num_warps": 2},
    ],
}  # fmt: skip


def _check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol


@pytest.mark.parametrize("name", GEMMS)
@pytest.mark.parametrize("shape", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemm_matches_reference(load_kernel, name, shape, dtype):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), dtype)


@pytest.mark.parametrize("name", GEMMS)
def test_gemm_fp16_and_strided_inputs(load_kernel, name):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs({"m": 20, "n": 40, "k": 72}, torch.float16)
    inputs["a"] = inputs["a"].T.contiguous().T  # column-major A exercises the strides
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), torch.float16)


@pytest.mark.parametrize("name", GEMMS)
def test_gemm_tuning_extremes(load_kernel, name):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs({"m": 33, "n": 48, "k": 96}, torch.float32)
    ref = mod.reference(**inputs)
    for params in EXTREMES[name]:
        _check(getattr(mod, name)(**inputs, **params), ref, torch.float32)


@pytest.mark.parametrize("name", GEMMS)
def test_gemm_rejects_mismatched_k(load_kernel, name):
    mod = load_kernel(f"triton/gemm/{name}.py")
    with pytest.raises(ValueError, match="A \\(M, K\\)"):
        getattr(mod, name)(torch.zeros(4, 8), torch.zeros(4, 9))


FP8_GEMMS = ["block_scaled_mm_fp8", "block_scaled_mm_fp8_splitk"]
FP8_CASES = [
    {"m": 5, "n": 200, "k": 384},
    {"m": 33, "n": 48, "k": 200},
    {"m": 1, "n": 130, "k": 128},
]
FP8_EXTREMES = {
    "block_scaled_mm_fp8": [
        {"block_m": 64, "block_n": 128, "group_m": 8, "num_warps": 4, "num_stages": 3},
        {"block_m": 128, "block_n": 32, "group_m": 16, "num_warps": 8, "num_stages": 4},
        {"block_m": 16, "block_n": 32, "group_m": 1, "num_stages": 2},
    ],
    "block_scaled_mm_fp8_splitk": [
        {"split_k": 4, "block_m": 16, "block_n": 64, "num_warps": 4, "num_stages": 3},
        {"split_k": 16, "block_m": 64, "block_n": 128, "num_warps": 8, "num_stages": 4},
        {"split_k": 1, "block_m": 32, "block_n": 32, "num_warps": 2},
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", FP8_GEMMS)
@pytest.mark.parametrize("shape", FP8_CASES)
def test_block_scaled_mm_matches_reference(load_kernel, name, shape):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs(shape, torch.float8_e4m3fn)
    _check(getattr(mod, name)(**inputs), mod.reference(**inputs), torch.float32)


@pytest.mark.parametrize("name", FP8_GEMMS)
def test_block_scaled_mm_tuning_extremes(load_kernel, name):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs({"m": 17, "n": 160, "k": 384}, torch.float8_e4m3fn)
    ref = mod.reference(**inputs)
    for params in FP8_EXTREMES[name]:
        _check(getattr(mod, name)(**inputs, **params), ref, torch.float32)


@pytest.mark.parametrize("name", FP8_GEMMS)
def test_block_scaled_mm_rejects_bad_scales(load_kernel, name):
    mod = load_kernel(f"triton/gemm/{name}.py")
    inputs = mod.make_inputs({"m": 4, "n": 128, "k": 256}, torch.float8_e4m3fn)
    inputs["a_scales"] = inputs["a_scales"][:, :1]
    with pytest.raises(ValueError, match="a_scales"):
        getattr(mod, name)(**inputs)
