"""Row softmax reference in fp32 (torch.softmax subtracts the row max)."""

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).to(x.dtype)


def _make_inputs(
    rows: int, cols: int, offset: float = 10.0, dtype: str = "fp32", device: str = "cuda"
):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    # logits-like spread (std 3, a per-row offset of std `offset`): rows are peaked, never
    # near-uniform, so an all-zero or constant output fails the tolerance, and the max-subtraction
    # is exercised (a large offset makes exp overflow without it)
    x = 3.0 * torch.randn(rows, cols, device=device, dtype=torch.float32)
    x = x + offset * torch.randn(rows, 1, device=device, dtype=torch.float32)
    return {"x": x.to(dt)}
