"""Fixtures for the spec tests: a throwaway problem folder with a valid reference and op.yaml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

#: A reference in the kwargs style: Model(eps), forward(x, weight), _make_inputs(tokens, hidden).
REFERENCE = """\
import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight


def _make_inputs(tokens: int, hidden: int, device: str = "cuda"):
    return {"x": torch.randn(tokens, hidden, device=device),
            "weight": torch.randn(hidden, device=device)}
"""

#: The smallest valid op.yaml over REFERENCE, as a mapping tests modify.
BASE_SPEC: dict[str, Any] = {
    "version": 1,
    "name": "tiny_rms",
    "reference": {"path": "reference.py"},
    "shapes": {
        "cases": [
            {"id": "a", "input_kwargs": {"tokens": 4, "hidden": 64}},
            {"id": "b", "input_kwargs": {"tokens": 8, "hidden": 96}, "split": "smoke"},
        ]
    },
}

WriteSpec = Callable[..., Path]


@pytest.fixture
def reference_text() -> str:
    """The text of the kwargs-style reference the spec fixtures use."""
    return REFERENCE


@pytest.fixture
def write_spec(tmp_path: Path) -> WriteSpec:
    """Return ``write(changes=None, drop=(), text=None, reference=REFERENCE) -> op.yaml path``.

    ``changes`` updates BASE_SPEC's top-level keys, ``drop`` removes some, and ``text`` replaces
    the YAML outright. ``reference`` is written to reference.py beside it (None: no file).
    """

    def write(
        changes: dict[str, Any] | None = None,
        drop: tuple[str, ...] = (),
        text: str | None = None,
        reference: str | None = REFERENCE,
        name: str = "op.yaml",
    ) -> Path:
        if reference is not None:
            (tmp_path / "reference.py").write_text(reference, encoding="utf-8")
        if text is None:
            spec = {k: v for k, v in {**BASE_SPEC, **(changes or {})}.items() if k not in drop}
            text = yaml.safe_dump(spec, sort_keys=False)
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
