"""CUDA C++ reference kernels (k3 set): headers parse on the CPU; results match on the GPU.

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
    "attention/paged_decode_attention_per_head_cuda": [
        {"seq_lens": [1], "num_heads_q": 32, "num_heads_kv": 8, "head_dim": 128},
        {"seq_lens": [37, 300, 5], "num_heads_q": 8, "num_heads_kv": 2, "head_dim": 64},
        {"seq_lens": [17, 40], "num_heads_q": 3, "num_heads_kv": 3, "head_dim": 80, "page_size": 8},
    ],
    "conv/causal_conv1d_update_cuda": [
        {"batch": 1, "dim": 4096},
        {"batch": 4, "dim": 1000, "width": 3, "indices": [2, -1, 0, 4]},
        {"batch": 3, "dim": 37, "state_len": 6, "activation": None},
    ],
    "rope/mrope_cuda": [
        {"tokens": 1, "heads": 16, "kv_heads": 2, "head_size": 128, "sections": [16, 24, 24]},
        {"tokens": 7, "heads": 4, "kv_heads": 1, "head_size": 64, "sections": [8, 12, 12]},
        {"tokens": 5, "heads": 3, "kv_heads": 3, "head_size": 80, "sections": [16, 8, 8]},
    ],
    "rope/fused_qkv_rope_cuda": [
        {"tokens": 1, "heads": 32, "kv_heads": 4, "head_dim": 128},
        {"tokens": 5, "heads": 6, "kv_heads": 2, "head_dim": 64, "bias": True},
        {"tokens": 3, "heads": 3, "kv_heads": 1, "head_dim": 128, "rope_dim": 96},
    ],
    "sampling/topk_filter_block_cuda": [
        {"rows": 1, "vocab": 151936},
        {"rows": 3, "vocab": 1001, "ties": True},
        {"rows": 5, "vocab": 40},  # k = 50 > vocab: rows copied whole
    ],
    "scan/block_scan_cumsum_cuda": [
        {"rows": 1, "cols": 5000},
        {"rows": 33, "cols": 1000},
        {"rows": 7, "cols": 13},
    ],
    "other/transpose_tiled_smem_cuda": [
        {"m": 4096, "n": 1000},
        {"batch": 3, "m": 33, "n": 65},
        {"m": 1, "n": 7},
    ],
    "quantization/dequant_fp8_vec_cuda": [
        {"rows": 1, "hidden": 7168},
        {"rows": 33, "hidden": 1000},
        {"rows": 4, "hidden": 13},  # not a multiple of 8: the scalar path
    ],
    "softmax/log_softmax_block_cuda": [
        {"rows": 1, "cols": 32000},
        {"rows": 77, "cols": 1000},
        {"rows": 9, "cols": 7},
    ],
    "other/gated_delta_rule_update_cuda": [
        {
            "batch": 1,
            "tokens": 1,
            "q_heads": 16,
            "v_heads": 32,
            "key_dim": 128,
            "value_dim": 128,
            "slots": 2,
        },
        {
            "batch": 2,
            "tokens": 5,
            "q_heads": 2,
            "v_heads": 4,
            "key_dim": 64,
            "value_dim": 48,
            "slots": 3,
        },
        {
            "batch": 3,
            "tokens": 8,
            "q_heads": 1,
            "v_heads": 2,
            "key_dim": 100,
            "value_dim": 40,
            "slots": 3,
        },
    ],
}
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}
#: Relative L2 error of the whole output allowed per dtype (a zero output scores 1.0).
NORM_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
#: fp32 prefix sums of N(0, 1) rows reach |y| ~ 100 and the block scan adds in another order than
#: torch.cumsum, so errors of ~sqrt(N) * 6e-8 * |y| are expected; elementwise atol is widened.
SCAN_FP32_TOL = {"atol": 1e-3, "rtol": 1e-5}


def _clones(inputs):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _call(mod, relpath, inputs):
    """Run the launcher on clones: in-place kernels (and their references) update their inputs."""
    return getattr(mod, Path(relpath).name)(**_clones(inputs))


def _assert_close(out, ref, dtype, tol=None):
    if isinstance(out, dict):
        assert isinstance(ref, dict) and out.keys() == ref.keys()
        out, ref = tuple(out.values()), tuple(ref[k] for k in out)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs, strict=True):
        assert o.shape == r.shape and o.dtype == r.dtype
        of, rf = o.float(), r.float()
        torch.testing.assert_close(of, rf, **(tol or TOL[dtype]))
        rel = torch.linalg.vector_norm(of - rf) / torch.linalg.vector_norm(rf).clamp_min(1e-30)
        assert rel <= NORM_TOL[dtype], f"relative L2 error {rel:.3g}"


def test_cuda_k3_headers_parse_and_declare_helpers():
    """Each k3 file is a valid CUDA kernel with its helpers, checked without building it."""
    kernels, problems = load_kernels(KERNELS_ROOT)  # the root: paths are checked as dsl/family
    mine = {CUDA_ROOT / f"{rel}.py" for rel in KERNELS}
    assert [p for p in problems if any(str(path) in p for path in mine)] == []
    kernels = [k for k in kernels if k.path in mine]
    assert {k.path for k in kernels} == mine
    for kernel in kernels:
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
        built = [  # the extension is built once, at import: `_EXT = _extension()`
            n
            for n in tree.body
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and getattr(n.value.func, "id", "") == "_extension"
        ]
        assert [n.targets[0].id for n in built] == ["_EXT"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("relpath", list(KERNELS))
def test_cuda_k3_kernel_matches_reference(load_kernel, relpath, case, dtype):
    mod = load_kernel(f"cuda/{relpath}.py")
    inputs = mod.make_inputs(KERNELS[relpath][case], dtype, device="cuda")
    ref = mod.reference(**_clones(inputs))
    out = _call(mod, relpath, inputs)
    torch.cuda.synchronize()
    if relpath.startswith("sampling/topk_filter"):  # kept logits bit-exact, -inf where masked
        assert torch.equal(out, ref)
        kept = torch.isfinite(out).sum(-1)
        assert (kept >= min(50, out.shape[-1])).all() and (kept < out.shape[-1]).any() == (
            out.shape[-1] > 50
        )
        return
    tol = SCAN_FP32_TOL if relpath.startswith("scan/") and dtype == torch.float32 else None
    _assert_close(out, ref, dtype, tol)


@pytest.mark.gpu
def test_cuda_k3_conv_update_rolls_the_state_in_place(load_kernel):
    mod = load_kernel("cuda/conv/causal_conv1d_update_cuda.py")
    inputs = mod.make_inputs({"batch": 2, "dim": 64}, torch.float32, device="cuda")
    state = inputs["conv_state"]
    _, new_state = mod.causal_conv1d_update_cuda(**inputs)
    assert new_state.data_ptr() == state.data_ptr()
    torch.testing.assert_close(state[:, :, -1], inputs["x"])  # the token lands in the last slot


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("relpath", "call", "match"),
    [
        (
            "attention/paged_decode_attention_per_head_cuda",
            lambda m, dev: m.paged_decode_attention_per_head_cuda(
                **{
                    **m.make_inputs(
                        {"seq_lens": [3], "num_heads_q": 3, "num_heads_kv": 2, "head_dim": 64},
                        torch.bfloat16,
                        dev,
                    )
                }
            ),
            "multiple of HKV",
        ),
        (
            "conv/causal_conv1d_update_cuda",
            lambda m, dev: m.causal_conv1d_update_cuda(
                **{
                    **m.make_inputs({"batch": 2, "dim": 8}, torch.float32, dev),
                    "weight": torch.randn(8, 5, device=dev),
                }
            ),
            "W in 1..4",
        ),
        (
            "rope/mrope_cuda",
            lambda m, dev: m.mrope_cuda(
                **{
                    **m.make_inputs(
                        {
                            "tokens": 2,
                            "heads": 2,
                            "kv_heads": 1,
                            "head_size": 64,
                            "sections": [8, 12, 12],
                        },
                        torch.bfloat16,
                        dev,
                    ),
                    "mrope_section": [8, 12, 10],
                }
            ),
            "cos must be",
        ),
        (
            "rope/fused_qkv_rope_cuda",
            lambda m, dev: m.fused_qkv_rope_cuda(
                **{
                    **m.make_inputs(
                        {"tokens": 2, "heads": 2, "kv_heads": 1, "head_dim": 64},
                        torch.bfloat16,
                        dev,
                    ),
                    "rope_dim": 63,
                }
            ),
            "rope_dim must be even",
        ),
        (
            "sampling/topk_filter_block_cuda",
            lambda m, dev: m.topk_filter_block_cuda(torch.randn(2, 9, device=dev).half()),
            "fp32",
        ),
        (
            "scan/block_scan_cumsum_cuda",
            lambda m, dev: m.block_scan_cumsum_cuda(torch.randn(2, 9, device=dev), threads=48),
            "multiple of 32",
        ),
        (
            "other/transpose_tiled_smem_cuda",
            lambda m, dev: m.transpose_tiled_smem_cuda(torch.randn(9, device=dev)),
            "at least 2 dimensions",
        ),
        (
            "quantization/dequant_fp8_vec_cuda",
            lambda m, dev: m.dequant_fp8_vec_cuda(
                torch.zeros(4, 16, device=dev).to(torch.float8_e4m3fn), torch.ones(3, 1, device=dev)
            ),
            "scale must hold 4",
        ),
        (
            "softmax/log_softmax_block_cuda",
            lambda m, dev: m.log_softmax_block_cuda(torch.randn(2, 9, device=dev).long()),
            "CUDA fp32/fp16/bf16",
        ),
        (
            "other/gated_delta_rule_update_cuda",
            lambda m, dev: m.gated_delta_rule_update_cuda(
                **m.make_inputs(
                    {
                        "batch": 1,
                        "tokens": 1,
                        "q_heads": 1,
                        "v_heads": 1,
                        "key_dim": 256,
                        "value_dim": 32,
                        "slots": 1,
                    },
                    torch.bfloat16,
                    dev,
                )
            ),
            "key dim K must be in 1..128",
        ),
    ],
    ids=lambda v: v.split("/")[-1] if isinstance(v, str) and "/" in v else "",
)
def test_cuda_k3_launcher_rejects_bad_input(load_kernel, relpath, call, match):
    mod = load_kernel(f"cuda/{relpath}.py")
    with pytest.raises(ValueError, match=match):
        call(mod, "cuda")


@pytest.mark.gpu
def test_cuda_k3_qkv_rope_reads_int32_and_int64_positions_alike(load_kernel):
    mod = load_kernel("cuda/rope/fused_qkv_rope_cuda.py")
    shape = {"tokens": 9, "heads": 4, "kv_heads": 2, "head_dim": 64}
    inputs = mod.make_inputs(shape, torch.bfloat16, device="cuda")
    narrow = mod.fused_qkv_rope_cuda(**inputs)
    wide = mod.fused_qkv_rope_cuda(**{**inputs, "positions": inputs["positions"].long()})
    for a, b in zip(narrow, wide, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_cuda_k3_gated_delta_rule_copies_idle_slots_and_keeps_the_pool(load_kernel):
    mod = load_kernel("cuda/other/gated_delta_rule_update_cuda.py")
    shape = {"batch": 2, "tokens": 3, "q_heads": 2, "v_heads": 4, "key_dim": 64,
             "value_dim": 48, "slots": 5}  # fmt: skip
    inputs = mod.make_inputs(shape, torch.float32, device="cuda")
    pool = inputs["initial_state"].clone()
    _, final = mod.gated_delta_rule_update_cuda(**inputs)
    torch.cuda.synchronize()
    assert torch.equal(inputs["initial_state"], pool)  # the input pool is not modified
    used = set(inputs["initial_state_indices"].tolist())
    for slot in range(5):
        same = torch.equal(final[slot], pool[slot])
        assert same == (slot not in used), slot  # idle slots copied, owned ones updated
