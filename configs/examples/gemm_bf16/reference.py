"""bf16 GEMM reference: F.linear (C = A @ B^T) on bf16 operands.

Left in bf16 on purpose: cuBLAS multiplies bf16 on tensor cores with fp32 accumulation, which is
what the real layer does; an fp32 upcast would also make the eager baseline an fp32 GEMM.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.linear(a, b)


def _make_inputs(m: int, n: int, k: int, dtype: str = "bf16", device: str = "cuda"):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    a = torch.randn(m, k, device=device, dtype=torch.float32).to(dt)
    # weight scaled by 1/sqrt(k), as initialised layers are, so C stays O(1) at any k
    b = (torch.randn(n, k, device=device, dtype=torch.float32) * k**-0.5).to(dt)
    return {"a": a, "b": b}
