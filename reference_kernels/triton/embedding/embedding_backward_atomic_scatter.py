"""
---
id: embedding_backward_atomic_scatter
title: Embedding weight gradient, grad rows scatter-added by token id with fp32 atomics
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [scatter-add, atomic-add, tiled-rows, fp32-accumulate, padding-skip]
status: reference
launcher: embedding_backward_atomic_scatter
tuning:
  block_t: [4, 1, 2, 8, 16]
  block_d: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  grad_output: {shape: [..., D], dtypes: [bf16, fp16, fp32], aliases: [grad, dout]}
  indices: {shape: ['...'], dtypes: [int32, int64], aliases: [input, ids, input_ids]}
  num_weights: {type: int, aliases: [vocab_size, num_embeddings]}
  padding_idx: {type: int, aliases: [pad_id]}
returns:
  - {name: grad_weight, shape: [num_weights, D], dtype: fp32}
problem:
  shapes: [{batch: 2, seq: 9, vocab: 10, dim: 100}, {batch: 1, seq: 16, vocab: 6, dim: 40, padding_idx: 2}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The backward of torch.nn.functional.embedding for the table: grad_weight[v] = sum of grad_output[t]
over the tokens t with indices[t] = v; tokens whose id equals padding_idx contribute nothing (their
row stays zero, as in torch). Program (i, j) owns BLOCK_T tokens and hidden columns j*BLOCK_D..: it
loads their ids and one (BLOCK_T x BLOCK_D) tile of gradient rows, upcasts to fp32 and issues
tl.atomic_add into the fp32 table rows (red.global.add on the GPU, no return value used); the table
is zeroed first. No sort of the ids, no (V x T) one-hot and no intermediate, so it scales to large
vocabularies where only a few rows are touched. Bytes per gradient element: one read (2 B in bf16)
plus a 4-B atomic to L2; the zeroing writes 4 B per table element. Limits: the order of the atomic
adds is not fixed, so repeated ids give run-to-run differences of fp32 rounding (not bit-exact,
unlike a sort-and-segment-reduce); very hot ids (a padding-like token not declared as padding)
serialise their atomics; the gradient is returned in fp32 (cast it for a bf16 table); ids are not
bounds-checked.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_backward_atomic_scatter_kernel(
    # pointers
    g_ptr,
    ids_ptr,
    gw_ptr,
    # sizes
    T,
    D,
    # strides (elements; the last dim is contiguous)
    stride_gt,
    stride_wv,
    # scalars
    padding_idx,  # -1 when there is none
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ids = tl.load(ids_ptr + toks, mask=toks < T, other=-1).to(tl.int64)
    keep = (toks < T) & (ids != padding_idx)  # padding tokens add nothing
    mask = keep[:, None] & (cols < D)[None, :]
    g = tl.load(
        g_ptr + toks.to(tl.int64)[:, None] * stride_gt + cols[None, :], mask=mask, other=0.0
    )
    # int64 row offsets: a 150K x 8K table has more than 2^31 elements
    tl.atomic_add(gw_ptr + ids[:, None] * stride_wv + cols[None, :], g.to(tl.float32), mask=mask)


def _launch_config(d: int) -> dict[str, int]:
    """Return 4 tokens per program and up to 256 hidden columns."""
    return {"block_t": 4, "block_d": min(256, triton.next_power_of_2(d)), "num_warps": 4}


def embedding_backward_atomic_scatter(
    grad_output: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int | None = None,
    *,
    block_t: int | None = None,
    block_d: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the (num_weights, D) fp32 gradient of an embedding table for ``grad_output``.

    Args:
        grad_output: (..., D) bf16/fp16/fp32 gradient of the lookup's output.
        indices: (...) int32/int64 ids the forward looked up (same leading shape).
        num_weights: Rows of the table (V).
        padding_idx: Tokens with this id add nothing (negative counts from the end, as in torch);
            None = no padding id.
        block_t: Tokens per program (power of two); None = 4.
        block_d: Hidden columns per program (power of two); None = min(256, next_pow2(D)).
        num_warps: Warps per program; None = 4.

    Returns:
        grad_weight: (num_weights, D) fp32.

    Raises:
        ValueError: The shapes, dtypes or padding_idx do not fit, or a block size is not a power
            of two.
    """
    if grad_output.dim() < 1 or not grad_output.is_floating_point():
        raise ValueError(f"grad_output must be float (..., D); got {grad_output.dtype}")
    if tuple(indices.shape) != tuple(grad_output.shape[:-1]):
        raise ValueError(
            f"indices {tuple(indices.shape)} must have grad_output's leading shape "
            f"{tuple(grad_output.shape[:-1])}"
        )
    if indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"indices must be int32/int64; got {indices.dtype}")
    if num_weights < 1:
        raise ValueError(f"num_weights must be >= 1; got {num_weights}")
    pad = -1
    if padding_idx is not None:
        if not -num_weights <= padding_idx < num_weights:
            raise ValueError(
                f"padding_idx {padding_idx} is outside [-{num_weights}, {num_weights})"
            )
        pad = padding_idx % num_weights
    for name, value in (("block_t", block_t), ("block_d", block_d)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    d = grad_output.shape[-1]
    g = grad_output.reshape(-1, d)
    if g.stride(-1) != 1:
        g = g.contiguous()
    ids = indices.reshape(-1).contiguous()
    grad_weight = torch.zeros((num_weights, d), dtype=torch.float32, device=grad_output.device)
    if g.numel() == 0:
        return grad_weight
    cfg = _launch_config(d)
    given = {"block_t": block_t, "block_d": block_d, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(g.shape[0], cfg["block_t"]), triton.cdiv(d, cfg["block_d"]))
    _embedding_backward_atomic_scatter_kernel[grid](
        g, ids, grad_weight,
        g.shape[0], d,
        g.stride(0), grad_weight.stride(0),
        pad,
        BLOCK_T=cfg["block_t"], BLOCK_D=cfg["block_d"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return grad_weight


def reference(
    grad_output: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """Return torch's embedding weight gradient (autograd through F.embedding) in fp32."""
    d = grad_output.shape[-1]
    weight = torch.zeros(num_weights, d, device=grad_output.device, requires_grad=True)
    out = torch.nn.functional.embedding(indices.long(), weight, padding_idx=padding_idx)
    out.backward(grad_output.float())
    return weight.grad


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"batch", "seq", "vocab", "dim"}`` (+ ``"padding_idx"``).

    Ids are drawn from a small vocab so that ids repeat (the atomics must add up); grad ~ N(0, 1).
    """
    b, s, v, d = shape["batch"], shape["seq"], shape["vocab"], shape["dim"]
    return {
        "grad_output": torch.randn(b, s, d, device=device).to(dtype),
        "indices": torch.randint(0, v, (b, s), device=device),
        "num_weights": v,
        "padding_idx": shape.get("padding_idx"),
    }
