"""count_costs on the CPU: FLOPs per unit, unique bytes, notes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aka.hardware import count_costs
from aka.spec import ComputeUnit


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        variance = xf.pow(2).mean(-1, keepdim=True)
        return (xf * torch.rsqrt(variance + 1e-6)).to(x.dtype) * self.weight


class Add(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


M, K, N = 48, 32, 24


@pytest.mark.parametrize(
    ("dtype", "allow_tf32", "unit"),
    [
        (torch.bfloat16, False, ComputeUnit.TC_BF16),
        (torch.float16, False, ComputeUnit.TC_FP16),
        (torch.float32, False, ComputeUnit.FP32_MATMUL),
        (torch.float32, True, ComputeUnit.TC_TF32),
        (torch.bfloat16, True, ComputeUnit.TC_BF16),
    ],
)
def test_matmul_flops_go_to_the_unit_of_the_dtype(
    dtype: torch.dtype, allow_tf32: bool, unit: ComputeUnit
) -> None:
    a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)

    counts = count_costs(MatMul(), {"a": a, "b": b}, allow_tf32=allow_tf32)

    size = a.element_size()
    assert counts.flops_by_unit == {unit: 2.0 * M * N * K}
    assert counts.bytes_read == (M * K + K * N) * size
    assert counts.bytes_written == M * N * size


def test_positional_inputs_count_like_keyword_inputs() -> None:
    a, b = torch.randn(M, K), torch.randn(K, N)

    assert count_costs(MatMul(), [a, b]) == count_costs(MatMul(), {"a": a, "b": b})


def test_linear_counts_weight_and_bias_once_and_addmm_flops() -> None:
    layer = nn.Linear(K, N)
    x = torch.randn(M, K)

    counts = count_costs(layer, [x])

    assert counts.flops_by_unit == {ComputeUnit.FP32_MATMUL: 2.0 * M * N * K}
    assert counts.bytes_read == (M * K + N * K + N) * 4
    assert counts.bytes_written == M * N * 4


def test_rms_norm_is_vector_work_and_reads_x_and_weight_once() -> None:
    rows, hidden = 16, 64
    x = torch.randn(rows, hidden, dtype=torch.bfloat16)

    counts = count_costs(RMSNorm(hidden), {"x": x})

    assert set(counts.flops_by_unit) == {ComputeUnit.VECTOR_FP32}
    # pow 1 + mean 1 + mul 1 + weight mul 1 per element; +eps 1 and rsqrt 4 per row
    assert counts.flops_by_unit[ComputeUnit.VECTOR_FP32] == 4 * rows * hidden + 5 * rows
    assert counts.bytes_read == rows * hidden * 2 + hidden * 2
    assert counts.bytes_written == rows * hidden * 2


def test_same_tensor_passed_twice_counts_its_bytes_once() -> None:
    x = torch.randn(32, 16)

    twice = count_costs(Add(), {"x": x, "y": x})
    distinct = count_costs(Add(), {"x": x, "y": x.clone()})

    assert twice.bytes_read == 32 * 16 * 4
    assert distinct.bytes_read == 2 * 32 * 16 * 4
    assert twice.flops_by_unit == {ComputeUnit.VECTOR_FP32: 32 * 16}


def test_softmax_flops_and_bytes() -> None:
    x = torch.randn(8, 128, dtype=torch.float16)

    counts = count_costs(nn.Softmax(dim=-1), [x])

    assert counts.flops_by_unit == {ComputeUnit.VECTOR_FP32: 8.0 * 8 * 128}
    assert counts.bytes_read == counts.bytes_written == 8 * 128 * 2


class SliceOfBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(1000, 8))
        self.register_buffer("unused", torch.randn(1000, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.table[: x.shape[0]]


def test_only_the_used_slice_of_a_buffer_counts_and_unused_buffers_do_not() -> None:
    x = torch.randn(10, 8)

    counts = count_costs(SliceOfBuffer(), [x])

    assert counts.bytes_read == 2 * 10 * 8 * 4
    assert counts.bytes_written == 10 * 8 * 4


class CacheWrite(nn.Module):
    def forward(self, cache: torch.Tensor, new: torch.Tensor, start: int) -> torch.Tensor:
        cache[start : start + new.shape[0]] = new
        return new.sum(dim=-1)


def test_in_place_update_of_an_input_counts_as_written_not_read() -> None:
    cache, new = torch.zeros(100, 8), torch.randn(4, 8)

    counts = count_costs(CacheWrite(), [cache, new, 3])

    assert counts.bytes_read == 4 * 8 * 4  # only `new`; the cache slice is overwritten
    assert counts.bytes_written == 4 * 8 * 4 + 4 * 4  # the cache slice + the output


class TupleAndDict(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"sig": torch.sigmoid(x), "pair": (x.exp(), x.sum())}


def test_outputs_in_tuples_and_dicts_are_all_counted() -> None:
    x = torch.randn(10, 10)

    counts = count_costs(TupleAndDict(), [x])

    assert counts.bytes_written == (100 + 100 + 1) * 4
    assert counts.flops_by_unit[ComputeUnit.VECTOR_FP32] == 6 * 100 + 4 * 100 + 100


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64, dtype=torch.bfloat16)
        self.down = nn.Linear(64, 16, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(nn.functional.silu(self.up(x)))
        return torch.bmm(h.view(2, 4, 16), h.view(2, 16, 4))


def test_matmul_flops_agree_with_flop_counter_mode() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    model, x = MLP(), torch.randn(8, 32, dtype=torch.bfloat16)
    with FlopCounterMode(display=False) as reference:
        model(x)

    counts = count_costs(model, [x])

    assert counts.flops_by_unit[ComputeUnit.TC_BF16] == reference.get_total_flops()
    assert counts.flops_by_unit[ComputeUnit.VECTOR_FP32] == 7 * 8 * 64  # silu


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_counts_two_matmuls_and_the_causal_share(causal: bool) -> None:
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16) for _ in range(3))

    counts = count_costs(Attention(causal), [q, k, v])

    full = 4.0 * b * h * s * s * d
    share = (s * (s + 1) / 2) / (s * s) if causal else 1.0
    assert counts.flops_by_unit == {ComputeUnit.TC_BF16: pytest.approx(full * share)}
    assert counts.bytes_read == 3 * b * h * s * d * 2
    assert any("FlashAttention convention" in n for n in counts.notes)
    assert any("causal" in n for n in counts.notes) is causal


class Sort(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=-1).values


def test_unpriced_ops_are_noted() -> None:
    counts = count_costs(Sort(), [torch.randn(4, 8)])

    assert counts.flops_by_unit == {}
    assert counts.notes == ["unpriced op aten.sort: counted 0 FLOPs"]


def test_integer_matmul_is_priced_at_the_fp8_rate_with_a_note() -> None:
    a = torch.randint(-4, 4, (M, K), dtype=torch.int8)
    b = torch.randint(-4, 4, (K, N), dtype=torch.int8)

    try:
        counts = count_costs(MatMul(), [a, b])
    except RuntimeError as err:  # some CPU builds have no int8 mm
        pytest.skip(f"int8 matmul unsupported here: {err}")

    assert counts.flops_by_unit == {ComputeUnit.TC_FP8: 2.0 * M * N * K}
    assert any("fp8 tensor rate" in n for n in counts.notes)


@pytest.mark.gpu
def test_count_costs_on_gpu_bf16_gemm_and_fp8_scaled_mm() -> None:
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16)
    assert count_costs(MatMul(), [a, b]).flops_by_unit == {
        ComputeUnit.TC_BF16: 2.0 * 256 * 64 * 128
    }

    class ScaledMM(nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return torch._scaled_mm(x, w, scale_a=s, scale_b=s, out_dtype=torch.bfloat16)

    x = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(32, 128, device="cuda").to(torch.float8_e4m3fn).t()
    s = torch.ones((), device="cuda")
    counts = count_costs(ScaledMM(), [x, w, s])
    assert counts.flops_by_unit == {ComputeUnit.TC_FP8: 2.0 * 64 * 32 * 128}
    assert counts.bytes_read == 64 * 128 + 32 * 128 + 4


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(1000, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def test_embedding_reads_the_gathered_rows_not_the_table() -> None:
    ids = torch.tensor([3, 7, 7, 999])

    counts = count_costs(Lookup(), [ids])

    assert counts.bytes_read == 4 * 16 * 4 + 4 * 8  # four rows of fp32 + the int64 ids
    assert counts.bytes_written == 4 * 16 * 4
    assert any("aten.embedding" in n for n in counts.notes)


class IndexSelectAll(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return x[ids]


def test_gather_charge_is_capped_by_the_source_size() -> None:
    x, ids = torch.randn(4, 8), torch.zeros(100, dtype=torch.long)

    counts = count_costs(IndexSelectAll(), [x, ids])

    assert counts.bytes_read == 4 * 8 * 4 + 100 * 8
