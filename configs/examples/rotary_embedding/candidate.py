"""
---
id: rotary_embedding_candidate
op_family: rope
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [token-per-program, all-heads-per-program, fp32-math]
status: candidate
measured: []
---
Neox-style RoPE with one program per token: the program reads the token's position, loads its cos
and sin rows from the fp32 cache once, and rotates every query head and then every key head as
(heads, rot_dim / 2) tiles in fp32; channels past rot_dim are copied unchanged. Moves 2 bytes read
+ 2 bytes written per q/k element (bf16) plus 4 * rot_dim bytes of cache per token. Limit: all the
heads of one token form one tile, so very many heads (> 128) would spill registers.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_heads(
    # pointers to one token's row of x (input) and out
    x_row_ptr,
    out_row_ptr,
    # sizes
    n_heads,
    # the token's cos and sin, fp32 vectors of BLOCK_HALF (masked lanes 0)
    cos,
    sin,
    # meta
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_PASS: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_HEADS)
    j = tl.arange(0, BLOCK_HALF)
    head_mask = heads < n_heads
    mask = head_mask[:, None] & (j < HALF)[None, :]

    # neox style: channel j pairs with channel j + HALF of the same head
    offs_1 = heads[:, None] * HEAD_DIM + j[None, :]
    offs_2 = offs_1 + HALF
    x1 = tl.load(x_row_ptr + offs_1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row_ptr + offs_2, mask=mask, other=0.0).to(tl.float32)
    out_1 = x1 * cos[None, :] - x2 * sin[None, :]
    out_2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(out_row_ptr + offs_1, out_1.to(out_row_ptr.dtype.element_ty), mask=mask)
    tl.store(out_row_ptr + offs_2, out_2.to(out_row_ptr.dtype.element_ty), mask=mask)

    # partial rotary: channels [2 * HALF, HEAD_DIM) are copied bit for bit
    if BLOCK_PASS > 0:
        p = 2 * HALF + tl.arange(0, BLOCK_PASS)
        pass_mask = head_mask[:, None] & (p < HEAD_DIM)[None, :]
        offs_p = heads[:, None] * HEAD_DIM + p[None, :]
        x_pass = tl.load(x_row_ptr + offs_p, mask=pass_mask)
        tl.store(out_row_ptr + offs_p, x_pass.to(out_row_ptr.dtype.element_ty), mask=pass_mask)


@triton.jit
def _rope_neox_kernel(
    # pointers
    pos_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    q_out_ptr,
    k_out_ptr,
    # sizes
    n_q_heads,
    n_k_heads,
    # strides (elements)
    stride_q_tok,
    stride_k_tok,
    stride_q_out_tok,
    stride_k_out_tok,
    stride_cache_pos,
    # meta
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    BLOCK_Q_HEADS: tl.constexpr,
    BLOCK_K_HEADS: tl.constexpr,
    BLOCK_PASS: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)  # int64: tokens * stride can pass 2^31
    pos = tl.load(pos_ptr + tok).to(tl.int64)

    # cos in the first half of the cache row, sin in the second; loaded once for all heads
    j = tl.arange(0, BLOCK_HALF)
    j_mask = j < HALF
    cache_row = cache_ptr + pos * stride_cache_pos
    cos = tl.load(cache_row + j, mask=j_mask, other=0.0).to(tl.float32)
    sin = tl.load(cache_row + HALF + j, mask=j_mask, other=0.0).to(tl.float32)

    _rope_heads(
        q_ptr + tok * stride_q_tok, q_out_ptr + tok * stride_q_out_tok, n_q_heads, cos, sin,
        HEAD_DIM, HALF, BLOCK_Q_HEADS, BLOCK_HALF, BLOCK_PASS,
    )  # fmt: skip
    _rope_heads(
        k_ptr + tok * stride_k_tok, k_out_ptr + tok * stride_k_out_tok, n_k_heads, cos, sin,
        HEAD_DIM, HALF, BLOCK_K_HEADS, BLOCK_HALF, BLOCK_PASS,
    )  # fmt: skip


def _launch_config(n_q_heads: int, n_k_heads: int, head_dim: int, rot_dim: int) -> dict[str, int]:
    """Return the block sizes (powers of two covering heads, half the rotary dims, the rest)."""
    half = rot_dim // 2
    pass_dims = head_dim - rot_dim
    return {
        "HALF": half,
        "BLOCK_HALF": triton.next_power_of_2(half),
        "BLOCK_Q_HEADS": triton.next_power_of_2(n_q_heads),
        "BLOCK_K_HEADS": triton.next_power_of_2(n_k_heads),
        "BLOCK_PASS": triton.next_power_of_2(pass_dims) if pass_dims > 0 else 0,
        "num_warps": 4 if n_q_heads * head_dim >= 2048 else 2,
    }


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return neox-rotated copies of ``q`` (tokens, heads * head_dim) and ``k``."""
    tokens = positions.shape[0]
    rot_dim = cos_sin_cache.shape[-1]
    if q.shape[0] != tokens or k.shape[0] != tokens:
        raise ValueError(f"q {tuple(q.shape)} / k {tuple(k.shape)} need {tokens} tokens")
    if q.shape[-1] % head_dim or k.shape[-1] % head_dim:
        raise ValueError(f"q {tuple(q.shape)} / k {tuple(k.shape)}: not whole heads of {head_dim}")
    if rot_dim % 2 or rot_dim > head_dim:
        raise ValueError(f"rot_dim {rot_dim} must be even and at most head_dim {head_dim}")
    q2d = q.reshape(tokens, -1).contiguous()
    k2d = k.reshape(tokens, -1).contiguous()
    cache = cos_sin_cache.contiguous()
    q_out = torch.empty_like(q2d)
    k_out = torch.empty_like(k2d)
    if tokens == 0:
        return q_out.view(q.shape), k_out.view(k.shape)
    n_q_heads = q2d.shape[1] // head_dim
    n_k_heads = k2d.shape[1] // head_dim
    _rope_neox_kernel[(tokens,)](
        positions.contiguous(), q2d, k2d, cache, q_out, k_out,
        n_q_heads, n_k_heads,
        q2d.stride(0), k2d.stride(0), q_out.stride(0), k_out.stride(0), cache.stride(0),
        HEAD_DIM=head_dim,
        **_launch_config(n_q_heads, n_k_heads, head_dim, rot_dim),
    )  # fmt: skip
    return q_out.view(q.shape), k_out.view(k.shape)


class ModelNew(torch.nn.Module):
    def __init__(self, head_dim: int = 128):
        super().__init__()
        self.head_dim = head_dim

    def forward(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        cos_sin_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary_embedding(positions, q, k, cos_sin_cache, self.head_dim)
