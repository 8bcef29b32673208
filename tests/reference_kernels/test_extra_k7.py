"""Extra reference kernels (k7 set: transforms, sparse, optimizer, SSD, backward passes) against
their PyTorch references, in the interpreter."""

import pytest
import torch

from tests.reference_kernels.refill import refilled_inputs

FP = [torch.float32, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}
PATHS = {
    "hadamard_transform_fwht": "triton/other/hadamard_transform_fwht.py",
    "stream_compaction_mask_scan": "triton/other/stream_compaction_mask_scan.py",
    "csr_spmv_row_per_program": "triton/other/csr_spmv_row_per_program.py",
    "index_add_rows_atomic": "triton/other/index_add_rows_atomic.py",
    "dropout_philox_seeded": "triton/other/dropout_philox_seeded.py",
    "fused_adamw_step": "triton/other/fused_adamw_step.py",
    "mamba2_ssd_chunk_state": "triton/other/mamba2_ssd_chunk_state.py",
    "beam_search_topk_step": "triton/sampling/beam_search_topk_step.py",
    "cross_entropy_backward_rowwise": "triton/other/cross_entropy_backward_rowwise.py",
    "swiglu_backward": "triton/other/swiglu_backward.py",
}
# (shape, dtype) smoke cases per kernel; exact kernels are compared bitwise
CASES = {
    "hadamard_transform_fwht": [
        ({"rows": 5, "n": 256}, torch.float32),
        ({"rows": 3, "n": 1024, "normalize": True}, torch.bfloat16),
        ({"rows": 2, "n": 2}, torch.float32),
    ],
    "stream_compaction_mask_scan": [
        ({"rows": 300, "cols": 3}, torch.float32),
        ({"rows": 40, "cols": 200, "keep": 0.2}, torch.bfloat16),
    ],
    "csr_spmv_row_per_program": [
        ({"rows": 20, "cols": 300, "density": 0.3}, torch.float32),
        ({"rows": 9, "cols": 100, "density": 0.5}, torch.bfloat16),
    ],
    "index_add_rows_atomic": [
        ({"rows": 8, "src_rows": 40, "cols": 100, "alpha": 0.5}, torch.float32),
        ({"rows": 30, "src_rows": 6, "cols": 33}, torch.bfloat16),
    ],
    "dropout_philox_seeded": [
        ({"rows": 4, "cols": 1000, "p": 0.5}, torch.float32),
        ({"rows": 3, "cols": 333, "p": 0.1, "seed": 2**40 + 7}, torch.bfloat16),
    ],
    "fused_adamw_step": [({"n": 3000, "step": 1}, torch.float32), ({"n": 77}, torch.float32)],
    "mamba2_ssd_chunk_state": [
        (
            {
                "batch": 1,
                "seqlen": 40,
                "heads": 2,
                "groups": 1,
                "headdim": 16,
                "dstate": 16,
                "chunk": 32,
            },
            torch.float32,
        ),
        (
            {
                "batch": 2,
                "seqlen": 32,
                "heads": 4,
                "groups": 2,
                "headdim": 20,
                "dstate": 16,
                "chunk": 16,
            },
            torch.float32,
        ),
    ],  # fmt: skip
    "beam_search_topk_step": [
        ({"batch": 2, "beams": 2, "vocab": 300}, torch.float32),
        ({"batch": 3, "beams": 1, "vocab": 2}, torch.float32),
    ],
    "cross_entropy_backward_rowwise": [
        ({"rows": 5, "vocab": 700, "ignored": 2}, torch.float32),
        ({"rows": 4, "vocab": 100, "ignored": 0, "reduction": "sum"}, torch.bfloat16),
    ],
    "swiglu_backward": [
        ({"rows": 7, "d": 300}, torch.float32),
        ({"rows": 3, "d": 64}, torch.bfloat16),
    ],
}
# tuning overrides for the extreme-values test: first and last candidate of each list
EXTREME = {
    "hadamard_transform_fwht": [{"block_m": 1, "num_warps": 1}, {"block_m": 16, "num_warps": 8}],
    "stream_compaction_mask_scan": [
        {"block_m": 16, "block_c": 32, "num_warps": 1},
        {"block_m": 1024, "block_c": 512, "num_warps": 8},
    ],
    "csr_spmv_row_per_program": [
        {"block_nnz": 16, "num_warps": 1},
        {"block_nnz": 256, "num_warps": 8},
    ],
    "index_add_rows_atomic": [
        {"block_r": 1, "block_c": 64, "num_warps": 1},
        {"block_r": 16, "block_c": 1024, "num_warps": 8},
    ],
    "dropout_philox_seeded": [{"block": 256, "num_warps": 1}, {"block": 4096, "num_warps": 8}],
    "fused_adamw_step": [{"block": 256, "num_warps": 1}, {"block": 4096, "num_warps": 8}],
    "mamba2_ssd_chunk_state": [
        {"block_p": 16, "block_n": 16, "block_l": 16, "input_precision": "ieee", "num_warps": 2},
        {"block_p": 64, "block_n": 128, "block_l": 64, "input_precision": "tf32", "num_warps": 8},
    ],
    "beam_search_topk_step": [{"block_v": 256, "num_warps": 1}, {"block_v": 4096, "num_warps": 8}],
    "cross_entropy_backward_rowwise": [
        {"block_v": 512, "num_warps": 2},
        {"block_v": 8192, "num_warps": 16},
    ],
    "swiglu_backward": [
        {"block_m": 1, "block_d": 128, "num_warps": 1},
        {"block_m": 16, "block_d": 2048, "num_warps": 8},
    ],
}
EXTREME_SHAPE = {
    "hadamard_transform_fwht": {"rows": 3, "n": 64},
    "stream_compaction_mask_scan": {"rows": 70, "cols": 40},
    "csr_spmv_row_per_program": {"rows": 6, "cols": 500, "density": 0.2},
    "index_add_rows_atomic": {"rows": 5, "src_rows": 20, "cols": 70},
    "dropout_philox_seeded": {"rows": 2, "cols": 700},
    "fused_adamw_step": {"n": 1000},
    "mamba2_ssd_chunk_state": {
        "batch": 1,
        "seqlen": 24,
        "heads": 2,
        "groups": 2,
        "headdim": 16,
        "dstate": 16,
        "chunk": 16,
    },  # fmt: skip
    "beam_search_topk_step": {"batch": 2, "beams": 2, "vocab": 100},
    "cross_entropy_backward_rowwise": {"rows": 3, "vocab": 600},
    "swiglu_backward": {"rows": 3, "d": 100},
}
# bitwise in fp32 (bf16 compaction too: only bits move; bf16 dropout rounds x / (1 - p) in the
# interpreter's truncating cast, so there only its zero pattern is bitwise)
EXACT = {"stream_compaction_mask_scan", "beam_search_topk_step", "dropout_philox_seeded"}


def _check(name, out, ref, dtype, tol=None):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = tol or TOL[dtype]
    if name == "mamba2_ssd_chunk_state" and tol is None:
        atol, rtol = 1e-4, 1e-4  # fp64 reference, fp32 dot accumulation
    for o, r in zip(outs, refs, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        if name == "dropout_philox_seeded":
            assert torch.equal(o == 0, r == 0)  # the Philox mask is reproduced bit for bit
        if name in EXACT and not (name == "dropout_philox_seeded" and dtype != torch.float32):
            assert torch.equal(o, r)
            continue
        torch.testing.assert_close(o.float(), r.float(), atol=atol, rtol=rtol)
        # a whole-output check so a zero output cannot pass
        assert (o.float() - r.float()).norm() <= rtol * r.float().norm() + atol
    assert any(r.float().abs().sum() > 0 for r in refs)  # the reference itself is not all zeros


def _run(load_kernel, name, shape, dtype, **tuning):
    mod = load_kernel(PATHS[name])
    inputs = mod.make_inputs(shape, dtype)
    # on copies: some kernels (and their references) update their inputs in place
    ref = mod.reference(**{k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
    out = getattr(mod, name)(**inputs, **tuning)
    # tf32 dots (10-bit mantissa) on the GPU; the interpreter computes them in fp32 anyway
    tol = (2e-2, 2e-2) if tuning.get("input_precision") == "tf32" else None
    _check(name, out, ref, dtype, tol)
    return mod, inputs, out


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [(n, s, d) for n, cases in CASES.items() for s, d in cases],
    ids=lambda v: str(v) if not isinstance(v, dict) else "-".join(map(str, v.values())),
)
def test_kernel_matches_reference(load_kernel, name, shape, dtype):
    _run(load_kernel, name, shape, dtype)


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("name", list(EXTREME))
def test_kernel_extreme_tuning(load_kernel, name, which):
    _run(load_kernel, name, EXTREME_SHAPE[name], torch.float32, **EXTREME[name][which])


BAD_CALLS = {
    "hadamard_transform_fwht": (
        lambda m: m.hadamard_transform_fwht(torch.randn(2, 12)),
        "power of two",
    ),
    "stream_compaction_mask_scan": (
        lambda m: m.stream_compaction_mask_scan(torch.randn(4, 2), torch.ones(4), 2),
        "bool",
    ),
    "csr_spmv_row_per_program": (
        lambda m: m.check_inputs(
            torch.tensor([0, 1, 3]), torch.tensor([0, 1]), torch.randn(2), torch.randn(3)
        ),
        "nnz",
    ),
    "index_add_rows_atomic": (  # the index range is read on the host, so in check_inputs
        lambda m: m.check_inputs(torch.zeros(3, 4), torch.tensor([0, 3])),
        r"\[0, 3\)",
    ),
    "dropout_philox_seeded": (lambda m: m.dropout_philox_seeded(torch.randn(8), p=1.5), "p must"),
    "fused_adamw_step": (
        lambda m: m.fused_adamw_step(*[torch.zeros(8)] * 3, torch.zeros(9)),
        "exp_avg_sq",
    ),
    "mamba2_ssd_chunk_state": (
        lambda m: m.mamba2_ssd_chunk_state(
            torch.randn(1, 8, 3, 16),
            torch.randn(1, 8, 2, 16),
            torch.randn(1, 3, 1, 8),
            torch.randn(1, 3, 1, 8),
        ),
        "multiple of G",
    ),  # fmt: skip
    "beam_search_topk_step": (
        lambda m: m.beam_search_topk_step(torch.randn(2, 3, 10), torch.randn(2, 2)),
        "beam_scores",
    ),
    "cross_entropy_backward_rowwise": (
        lambda m: m.cross_entropy_backward_rowwise(
            torch.randn(2, 5), torch.tensor([0, 1]), torch.tensor(1.0), reduction="none"
        ),
        "reduction",
    ),
    "swiglu_backward": (lambda m: m.swiglu_backward(torch.randn(2, 7), torch.randn(2, 3)), "even"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_kernel_rejects_bad_input(load_kernel, name):
    call, match = BAD_CALLS[name]
    with pytest.raises(ValueError, match=match):
        call(load_kernel(PATHS[name]))


# ------------------------------------------------------------------ kernel-specific behaviour
def test_hadamard_normalized_is_its_own_inverse(load_kernel):
    mod = load_kernel(PATHS["hadamard_transform_fwht"])
    x = torch.randn(2, 3, 128)
    y = mod.hadamard_transform_fwht(mod.hadamard_transform_fwht(x, True), True)
    torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)
    # H_4 row 1 is (1, -1, 1, -1): the transform of e_1 is that row
    e1 = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    assert torch.equal(mod.hadamard_transform_fwht(e1), torch.tensor([[1.0, -1.0, 1.0, -1.0]]))


def test_stream_compaction_all_and_none(load_kernel):
    mod = load_kernel(PATHS["stream_compaction_mask_scan"])
    x = torch.arange(60, dtype=torch.int32).reshape(20, 3)
    out, idx = mod.stream_compaction_mask_scan(x, torch.zeros(20, dtype=torch.bool), 0, block_m=16)
    assert out.shape == (0, 3) and idx.numel() == 0
    out, idx = mod.stream_compaction_mask_scan(x, torch.ones(20, dtype=torch.bool), 20, block_m=16)
    assert torch.equal(out, x) and torch.equal(idx, torch.arange(20))


def test_stream_compaction_num_kept_cuts_or_fills(load_kernel):
    # num_kept is the caller's count (nonzero_static): more rows than flags are zero-filled with
    # index -1, fewer cut the kept rows; M = 0 still fills
    mod = load_kernel(PATHS["stream_compaction_mask_scan"])
    x = torch.arange(60, dtype=torch.int32).reshape(20, 3) + 1
    mask = torch.arange(20) % 3 == 0  # 7 flags
    for num_kept in (3, 7, 40):
        out = mod.stream_compaction_mask_scan(x, mask, num_kept, block_m=16)
        ref = mod.reference(x, mask, num_kept)
        assert all(torch.equal(o, r) for o, r in zip(out, ref, strict=True))
    assert out[1][7:].eq(-1).all() and out[0][7:].eq(0).all()
    out, idx = mod.stream_compaction_mask_scan(x[:0], mask[:0], 5)
    assert out.eq(0).all() and idx.eq(-1).all() and out.shape == (5, 3)


def test_dropout_determinism_rate_and_scale(load_kernel):
    mod = load_kernel(PATHS["dropout_philox_seeded"])
    x = torch.ones(4096)
    y1 = mod.dropout_philox_seeded(x, p=0.3, seed=7)
    assert torch.equal(y1, mod.dropout_philox_seeded(x, p=0.3, seed=7))  # same seed, same mask
    assert not torch.equal(y1, mod.dropout_philox_seeded(x, p=0.3, seed=8))
    assert not torch.equal(y1, mod.dropout_philox_seeded(x, p=0.3, seed=7, offset=4096))
    kept = y1 != 0
    # keep rate ~ Binomial(4096, 0.7): sd = 0.0072, allow 5 sd
    assert abs(kept.float().mean().item() - 0.7) < 0.036
    torch.testing.assert_close(y1[kept], torch.full_like(y1[kept], 1 / 0.7))
    assert torch.equal(mod.dropout_philox_seeded(x, p=0.0), x)
    assert not mod.dropout_philox_seeded(x, p=1.0).any()


def test_fused_adamw_matches_torch_optimizer(load_kernel):
    mod = load_kernel(PATHS["fused_adamw_step"])
    inputs = mod.make_inputs({"n": 500, "step": 4}, torch.float32)
    param = torch.nn.Parameter(inputs["params"].clone())
    opt = torch.optim.AdamW([param], lr=inputs["lr"], weight_decay=inputs["weight_decay"])
    opt.state[param] = {
        "step": torch.tensor(3.0, device="cpu"),  # torch increments it to 4 in this step
        "exp_avg": inputs["exp_avg"].clone(),
        "exp_avg_sq": inputs["exp_avg_sq"].clone(),
    }
    param.grad = inputs["grads"].clone()
    opt.step()
    p, m, v = mod.fused_adamw_step(**inputs)
    assert p is inputs["params"]  # in place
    torch.testing.assert_close(p, param.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(v, opt.state[param]["exp_avg_sq"], atol=1e-7, rtol=1e-6)


def test_index_add_updates_in_place_with_duplicates(load_kernel):
    mod = load_kernel(PATHS["index_add_rows_atomic"])
    out = torch.zeros(2, 5)
    res = mod.index_add_rows_atomic(out, torch.tensor([1, 1, 1, 0]), torch.ones(4, 5), alpha=2.0)
    assert res is out
    assert torch.equal(out, torch.tensor([[2.0] * 5, [6.0] * 5]))


def test_index_add_skips_out_of_range_indices_on_the_device(load_kernel):
    # the launcher reads no index on the host; the kernel masks rows outside [0, R) off
    mod = load_kernel(PATHS["index_add_rows_atomic"])
    out, index = torch.zeros(2, 5), torch.tensor([1, 2, -1, 0])
    mod.check_inputs(out, index[[0, 3]])
    mod.index_add_rows_atomic(out, index, torch.ones(4, 5))
    assert torch.equal(out, torch.ones(2, 5))


def test_beam_search_merges_many_chunks(load_kernel):
    # 8 chunks per beam: the running buffer merges, and later chunks mostly skip
    mod = load_kernel(PATHS["beam_search_topk_step"])
    inputs = mod.make_inputs({"batch": 1, "beams": 3, "vocab": 250}, torch.float32)
    # the best candidate sits in the last chunk of the last beam
    inputs["logprobs"][0, 2, 249] = 0.0
    out = mod.beam_search_topk_step(**inputs, block_v=32)
    _check("beam_search_topk_step", out, mod.reference(**inputs), torch.float32)
    assert out[1][0, 0] == 2 and out[2][0, 0] == 249


def test_csr_spmv_structure_depends_only_on_the_shape(load_kernel):
    # the scorer refills the inputs with another seed's values at the same addresses
    mod = load_kernel(PATHS["csr_spmv_row_per_program"])
    shape = {"rows": 20, "cols": 300, "density": 0.3}
    torch.manual_seed(1)
    crow, cols = (mod.make_inputs(shape, torch.float32)[k] for k in ("crow_indices", "col_indices"))
    first, second = refilled_inputs(mod, shape, torch.float32)
    assert torch.equal(crow, second["crow_indices"])  # the structure is the shape's
    assert not torch.equal(cols, second["col_indices"])  # the columns are the seed's
    mod.check_inputs(**second)
    out = mod.csr_spmv_row_per_program(**first)
    _check("csr_spmv_row_per_program", out, mod.reference(**second), torch.float32)
