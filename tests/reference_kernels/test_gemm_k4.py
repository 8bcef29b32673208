"""GEMM and attention reference kernels (k4 set) against their PyTorch references, interpreted."""

from dataclasses import dataclass

import pytest
import torch

from tests.reference_kernels.conftest import ON_GPU, TF32_TOL

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


KERNELS = {
    "gemm_batched": Kernel(
        "gemm",
        [({"batch": 3, "m": 33, "n": 40, "k": 72}, {}),
         ({"batch": 1, "m": 1, "n": 17, "k": 200}, {}),
         ({"batch": 2, "m": 65, "n": 20, "k": 16}, {"block_m": 32, "group_m": 1})],
        [{"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 16, "num_warps": 8,
          "num_stages": 4}],
    ),
    "gemm_persistent_tiles": Kernel(
        "gemm",
        # 9 tiles on 8 CPU programs: the first program loops over two tiles
        [({"m": 130, "n": 130, "k": 40}, {}),
         ({"m": 1, "n": 17, "k": 200}, {}),
         ({"m": 33, "n": 48, "k": 96}, {"block_m": 16, "block_n": 16, "programs_per_sm": 1})],
        [{"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "programs_per_sm": 1,
          "num_warps": 8, "num_stages": 3},
         {"block_m": 64, "block_n": 256, "block_k": 32, "group_m": 16, "programs_per_sm": 2,
          "num_warps": 4, "num_stages": 4}],
        extreme_case=2,
    ),
    "gemm_stream_k": Kernel(
        "gemm",
        # each case splits tiles across programs, so the atomic fix-up runs
        [({"m": 33, "n": 48, "k": 200}, {}),
         ({"m": 1, "n": 17, "k": 200}, {"block_k": 16}),
         ({"m": 70, "n": 130, "k": 72}, {})],
        [{"block_m": 128, "block_n": 128, "block_k": 64, "programs_per_sm": 1, "num_warps": 8,
          "num_stages": 3},
         {"block_m": 32, "block_n": 32, "block_k": 32, "programs_per_sm": 2, "num_warps": 4,
          "num_stages": 4}],
        extreme_case=2,
    ),
    "gemm_int8_dequant_epilogue": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 200}, {}),
         ({"m": 1, "n": 17, "k": 64}, {}),
         ({"m": 65, "n": 130, "k": 32}, {"block_k": 32})],
        [{"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 128, "group_m": 1, "num_warps": 8,
          "num_stages": 4}],
        dtypes=(torch.int8,),
        extreme_dtype=torch.int8,
    ),
    "gemm_w4a16_dequant": Kernel(
        "gemm",
        [({"m": 5, "n": 40, "k": 256, "group_size": 64}, {}),
         ({"m": 1, "n": 17, "k": 96, "group_size": 32}, {}),
         ({"m": 33, "n": 70, "k": 256, "group_size": 128}, {})],
        [{"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
          "num_stages": 4},
         {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 1, "num_warps": 8,
          "num_stages": 3}],
        extreme_case=2,
    ),
    "gemm_fp8_weight_only": Kernel(
        "gemm",
        [({"m": 5, "n": 40, "k": 200}, {}),
         ({"m": 1, "n": 17, "k": 64}, {}),
         ({"m": 33, "n": 70, "k": 96}, {})],
        [{"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
          "num_stages": 4},
         {"block_m": 128, "block_n": 128, "block_k": 256, "group_m": 1, "num_warps": 8,
          "num_stages": 3}],
    ),
    "linear_sigmoid_mul_fused": Kernel(
        "gemm",
        # the atrex30 smoke shapes, then a prefill-sized row tile
        [({"token_count": 7, "hidden_size": 96, "out_features": 200}, {}),
         ({"token_count": 1, "hidden_size": 160, "out_features": 72}, {}),
         ({"token_count": 40, "hidden_size": 64, "out_features": 33}, {})],
        [{"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 128, "group_m": 1, "num_warps": 8,
          "num_stages": 4}],
    ),
    "gemm_bias_gelu_epilogue": Kernel(
        "gemm",
        [({"m": 33, "n": 40, "k": 72}, {}),
         ({"m": 1, "n": 17, "k": 200}, {}),
         ({"m": 65, "n": 20, "k": 16}, {"block_m": 32, "block_k": 16})],
        [{"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
          "num_stages": 3},
         {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 1, "num_warps": 8,
          "num_stages": 4}],
    ),
    "flash_attention_causal_dense": Kernel(
        "attention",
        # SQ < SK (bottom-right diagonal, GQA), square causal, a single decode-like query
        [({"batch": 2, "heads": 4, "kv_heads": 2, "sq": 24, "sk": 40, "d": 32},
          {"block_m": 16, "block_n": 16}),
         ({"batch": 1, "heads": 2, "kv_heads": 2, "sq": 33, "sk": 33, "d": 40}, {}),
         ({"batch": 1, "heads": 3, "kv_heads": 1, "sq": 1, "sk": 50, "d": 16}, {"block_n": 16})],
        [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2},
         {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 3}],
        extreme_case=1,
    ),
    "attention_decode_gqa_grouped_heads": Kernel(
        "attention",
        # several splits over uneven lengths, an empty entry, one split per entry
        [({"batch": 2, "heads": 8, "kv_heads": 2, "capacity": 80, "d": 32,
           "seq_lens": [80, 37]}, {"block_n": 16}),
         ({"batch": 3, "heads": 3, "kv_heads": 1, "capacity": 40, "d": 40,
           "seq_lens": [0, 1, 40]}, {}),
         ({"batch": 1, "heads": 4, "kv_heads": 4, "capacity": 100, "d": 16,
           "seq_lens": [99]}, {"block_n": 16, "max_splits": 1})],
        [{"max_splits": 16, "block_n": 64, "num_warps": 4},
         {"max_splits": 64, "block_n": 128, "num_warps": 8}],
    ),
}  # fmt: skip

CASES = [(name, i, dt) for name, k in KERNELS.items() for i in range(3) for dt in k.dtypes]


def _check(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Elementwise and whole-output checks at the output dtype's tolerance."""
    atol, rtol = TOL[ref.dtype]
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    # a whole-output check so a zero output cannot pass
    assert (out.float() - ref.float()).norm() <= rtol * ref.float().norm() + atol
    assert ref.float().norm() > 0


def _module(load_kernel, name):
    return load_kernel(f"triton/{KERNELS[name].family}/{name}.py")


@pytest.mark.parametrize(("name", "case", "dtype"), CASES, ids=str)
def test_kernel_matches_reference(load_kernel, name, case, dtype):
    mod = _module(load_kernel, name)
    shape, tuning = KERNELS[name].cases[case]
    inputs = mod.make_inputs(shape, dtype)
    _check(getattr(mod, name)(**inputs, **tuning), mod.reference(**inputs))


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_extreme_tuning(load_kernel, name, which):
    mod = _module(load_kernel, name)
    kernel = KERNELS[name]
    shape, _ = kernel.cases[kernel.extreme_case]
    inputs = mod.make_inputs(shape, kernel.extreme_dtype)
    _check(getattr(mod, name)(**inputs, **kernel.extremes[which]), mod.reference(**inputs))


def test_gemm_batched_broadcast_and_transposed_operands(load_kernel):
    mod = _module(load_kernel, "gemm_batched")
    a = torch.randn(3, 40, 24).transpose(1, 2)  # (3, 24, 40) column-major views
    b = torch.randn(1, 40, 18).expand(3, 40, 18)  # batch stride 0: one weight for all
    _check(mod.gemm_batched(a, b), mod.reference(a, b))


def test_gemm_bias_gelu_without_bias(load_kernel):
    mod = _module(load_kernel, "gemm_bias_gelu_epilogue")
    inputs = mod.make_inputs({"m": 9, "n": 30, "k": 48}, torch.float32)
    inputs["bias"] = None
    _check(mod.gemm_bias_gelu_epilogue(**inputs), mod.reference(**inputs))


def test_attention_decode_default_scale_and_lengths(load_kernel):
    mod = _module(load_kernel, "attention_decode_gqa_grouped_heads")
    inputs = mod.make_inputs(
        {"batch": 1, "heads": 2, "kv_heads": 1, "capacity": 20, "d": 16, "seq_lens": [20]},
        torch.float32,
    )
    inputs["seq_lens"] = None  # None attends over the whole capacity
    out = mod.attention_decode_gqa_grouped_heads(**inputs, softmax_scale=0.3)
    _check(out, mod.reference(**inputs, softmax_scale=0.3))


BAD_INPUTS = {
    "gemm_batched": ((torch.zeros(2, 4, 8), torch.zeros(3, 8, 4)), "BATCH"),
    "gemm_persistent_tiles": ((torch.zeros(4, 8), torch.zeros(4, 9)), r"A \(M, K\)"),
    "gemm_stream_k": ((torch.zeros(4, 0), torch.zeros(4, 0)), "K is 0"),
    "gemm_int8_dequant_epilogue": (
        (torch.zeros(4, 8, dtype=torch.int8), torch.zeros(5, 8, dtype=torch.int8),
         torch.ones(4, 1), torch.ones(5)),
        "a_scale",
    ),
    "gemm_w4a16_dequant": (
        (torch.zeros(2, 96), torch.zeros(4, 48, dtype=torch.uint8), torch.ones(4, 4)),
        "multiple of 16",
    ),
    "gemm_fp8_weight_only": ((torch.zeros(2, 32), torch.zeros(4, 32), torch.ones(4)), "float8"),
    "linear_sigmoid_mul_fused": (
        (torch.zeros(3, 8), torch.zeros(5, 8), torch.zeros(5), torch.zeros(3, 4)),
        "post_mul_mat",
    ),
    "gemm_bias_gelu_epilogue": ((torch.zeros(3, 8), torch.zeros(5, 8), torch.zeros(4)), "bias"),
    "flash_attention_causal_dense": (
        (torch.zeros(1, 2, 9, 16), torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16)),
        "SQ = 9 > SK = 8",
    ),
    "attention_decode_gqa_grouped_heads": (
        (torch.zeros(1, 3, 16), torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16)),
        "HKV dividing HQ",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_rejects_bad_inputs(load_kernel, name):
    mod = _module(load_kernel, name)
    args, message = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message):
        getattr(mod, name)(*args)
