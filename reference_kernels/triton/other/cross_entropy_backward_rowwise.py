"""
---
id: cross_entropy_backward_rowwise
title: Cross-entropy backward, softmax minus one-hot per row from an online max/sum pass
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, online-softmax, chunked-loop, two-pass, ignore-index, fp32-accumulate]
status: reference
launcher: cross_entropy_backward_rowwise
tuning:
  block_v: [2048, 512, 1024, 4096, 8192]
  num_warps: [8, 2, 4, 16]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [input, x, scores]}
  target: {shape: [T], dtypes: [int32, int64], aliases: [labels, targets]}
  grad_output: {shape: [], dtypes: [fp32], aliases: [grad, dloss, grad_loss]}
  ignore_index: {type: int, default: -100}
  reduction: {type: str, default: mean}
returns:
  - {name: grad_logits, shape: [T, V], dtype: logits}
problem:
  shapes: [{rows: 5, vocab: 700, ignored: 2}]
  dtypes: [fp32]
measured: []
---
d loss / d logits for loss = cross_entropy(logits, target, ignore_index, reduction) given the
upstream scalar gradient: row t gets (softmax(logits[t]) - one_hot(target[t])) * grad_output /
n_valid (reduction "mean", n_valid = rows whose target is not ignore_index, as torch divides) or *
grad_output ("sum"); ignored rows get zeros. One program per row, two passes over the vocab in
BLOCK_V chunks: an online (running max, rescaled running sum) pass in fp32, then a pass that
rewrites each chunk as exp(x - max) / sum * scale, subtracting scale at the target column. For
"mean" the divisor n_valid is counted on the device first by a one-program kernel (T index reads)
and read by every row program, so there is no host sync and no torch op between the launches.
Bytes per logit: two reads and one write (6 B in bf16); recomputing the softmax instead of storing
it from the forward keeps the activation memory at the logits only. Wins for LM heads (V = 32K-256K,
T in the thousands). Limits: one program per row (a single decode row uses one SM); no label
smoothing or z-loss; targets outside [0, V) other than ignore_index are not checked on the device.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _count_valid_kernel(
    # pointers
    target_ptr,
    count_ptr,  # out: fp32 number of rows whose target is not ignore_index
    # sizes
    T,
    ignore_index,
    # meta
    BLOCK_T: tl.constexpr,
):
    offs = tl.arange(0, BLOCK_T)
    n = tl.zeros((BLOCK_T,), tl.int32)
    for start in range(0, T, BLOCK_T):
        rows = start + offs
        target = tl.load(target_ptr + rows, mask=rows < T, other=ignore_index).to(tl.int64)
        n += (target != ignore_index).to(tl.int32)
    tl.store(count_ptr, tl.sum(n, axis=0).to(tl.float32))


@triton.jit
def _ce_backward_kernel(
    # pointers
    x_ptr,
    target_ptr,
    grad_ptr,  # scalar upstream gradient
    count_ptr,  # scalar divisor (n_valid for mean, 1 for sum)
    dx_ptr,
    # sizes
    V,
    ignore_index,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_dm,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    dx_row = dx_ptr + row * stride_dm
    offs = tl.arange(0, BLOCK_V)
    target = tl.load(target_ptr + row).to(tl.int64)
    if target == ignore_index:
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            tl.store(dx_row + cols, tl.zeros((BLOCK_V,), dx_ptr.dtype.element_ty), mask=cols < V)
    else:
        # pass 1: online max and rescaled sum of exp, per lane, combined at the end
        m = tl.full((BLOCK_V,), float("-inf"), tl.float32)
        s = tl.zeros((BLOCK_V,), tl.float32)
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes that saw only padding
            s = s * tl.exp(m - safe) + tl.exp(x - safe)
            m = m_new
        row_max = tl.max(m, axis=0)
        row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
        scale = tl.load(grad_ptr).to(tl.float32) / tl.load(count_ptr).to(tl.float32)
        coef = scale / row_sum
        # pass 2: write (softmax - one_hot) * scale
        for start in range(0, V, BLOCK_V):
            cols = start + offs
            mask = cols < V
            x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            g = tl.exp(x - row_max) * coef - tl.where(cols == target, scale, 0.0)
            tl.store(dx_row + cols, g.to(dx_ptr.dtype.element_ty), mask=mask)


def cross_entropy_backward_rowwise(
    logits: torch.Tensor,
    target: torch.Tensor,
    grad_output: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return d cross_entropy(logits, target) / d logits, times ``grad_output``.

    Args:
        logits: (T, V) bf16/fp16/fp32, last dimension contiguous.
        target: (T,) int32/int64 class ids in [0, V), or ignore_index.
        grad_output: 0-d fp32 tensor, the upstream gradient of the (scalar) loss.
        ignore_index: Target value whose rows get zero gradient and do not count in the mean.
        reduction: "mean" (divide by the non-ignored rows, torch's convention) or "sum".
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 2048).
        num_warps: Warps per program; None = 8.

    Returns:
        grad_logits: (T, V) with logits' dtype.

    Raises:
        ValueError: Bad shapes or dtypes, or an unknown reduction.
    """
    if logits.dim() != 2 or logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"logits must be (T, V) fp32/fp16/bf16; got {logits.dtype} {logits.shape}")
    if target.shape != logits.shape[:1] or target.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"target must be ({logits.shape[0]},) int32/int64; got {target.shape}")
    if grad_output.numel() != 1 or grad_output.dtype != torch.float32:
        raise ValueError(f"grad_output must be a 1-element fp32 tensor; got {grad_output.shape}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum'; got {reduction!r}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    dx = torch.empty((t, v), dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx
    target = target.contiguous()
    if reduction == "mean":  # counted by a kernel, kept on the device: no host sync
        count = torch.empty((), dtype=torch.float32, device=x.device)
        _count_valid_kernel[(1,)](
            target, count, t, ignore_index,
            BLOCK_T=min(triton.next_power_of_2(t), 1024), num_warps=4,
        )  # fmt: skip
    else:
        count = torch.ones((), dtype=torch.float32, device=x.device)
    blk = block_v or min(triton.next_power_of_2(v), 2048)
    _ce_backward_kernel[(t,)](
        x, target, grad_output.reshape(()), count, dx,
        v, ignore_index,
        x.stride(0), dx.stride(0),
        BLOCK_V=blk, num_warps=num_warps or 8,
    )  # fmt: skip
    return dx


def reference(
    logits: torch.Tensor,
    target: torch.Tensor,
    grad_output: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """Return the gradient by autograd through F.cross_entropy in fp32, cast to logits' dtype."""
    x = logits.detach().float().requires_grad_()
    loss = torch.nn.functional.cross_entropy(
        x, target.long(), ignore_index=ignore_index, reduction=reduction
    )
    (grad,) = torch.autograd.grad(loss, x, grad_outputs=grad_output.reshape(()).float())
    return grad.to(logits.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"rows", "vocab", "ignored"}``; N(0, 4) logits."""
    logits = (2.0 * torch.randn(shape["rows"], shape["vocab"], device=device)).to(dtype)
    target = torch.randint(0, shape["vocab"], (shape["rows"],), device=device)
    target[: shape.get("ignored", 1)] = -100
    return {
        "logits": logits,
        "target": target,
        "grad_output": torch.tensor(1.5, device=device),
        "ignore_index": -100,
        "reduction": shape.get("reduction", "mean"),
    }
