"""``aka.bench.interpreter_fix``: the CPU interpreter's fp32 -> bf16 stores round like a GPU's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aka.bench.interpreter_fix import apply, fp32_to_bf16_bits


def test_bits_match_torchs_round_to_nearest_even() -> None:
    x = torch.randn(200_000) * 3
    x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.4e38, -0.0, 1e-40])
    x[6] = torch.tensor(1.00390625)  # exactly halfway between two bf16 values: ties to even
    want = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = fp32_to_bf16_bits(x.numpy())
    nan = np.isnan(x.numpy())
    assert np.array_equal(got[~nan], want[~nan])
    assert (got[nan] & 0x7FC0 == 0x7FC0).all()  # still a NaN, quiet


def test_an_interpreted_bf16_store_rounds_as_torch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when @triton.jit runs, below
    import triton
    import triton.language as tl

    @triton.jit
    def store_bf16(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        m = i < n
        tl.store(o_ptr + i, tl.load(x_ptr + i, mask=m).to(o_ptr.dtype.element_ty), mask=m)

    apply()
    assert apply() is False  # idempotent
    x = torch.randn(5000) * 3
    out = torch.empty(5000, dtype=torch.bfloat16)
    store_bf16[(1,)](x, out, 5000, BLOCK=8192)
    assert torch.equal(out, x.to(torch.bfloat16))


@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dst", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_an_interpreted_fp8_cast_rounds_and_saturates_as_the_gpu_does(
    monkeypatch: pytest.MonkeyPatch, src: torch.dtype, dst: torch.dtype
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl

    @triton.jit
    def store_fp8(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        m = i < n
        tl.store(o_ptr + i, tl.load(x_ptr + i, mask=m).to(o_ptr.dtype.element_ty), mask=m)

    apply()
    largest = torch.finfo(dst).max
    x = (torch.randn(20_000) * largest / 3).to(src)  # a share beyond the largest: saturates
    x[:3] = torch.tensor([125.7196, -31.4507, float("nan")]).to(src)  # mantissa carries
    out = torch.empty(20_000, dtype=dst)
    store_fp8[(1,)](x, out, 20_000, BLOCK=32768)
    want = torch.where(x.isnan(), x.float(), x.float().clamp(-largest, largest)).to(dst)
    same = (out.float() == want.float()) | (out.float().isnan() & want.float().isnan())
    assert same.all(), (x[~same][:5], out[~same][:5], want[~same][:5])
