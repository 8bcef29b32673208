"""The static screen (stage 1): each rule fires with its id and line, and correct code passes."""

from __future__ import annotations

import pytest

from aka.bench import screen_source
from tests.bench.conftest import EXAMPLES, fixture_candidate

KERNEL = (
    "import triton\nimport triton.language as tl\nimport torch\n\n"
    "@triton.jit\ndef _k(x_ptr):\n    pass\n\n"
)


def _forward(body: str, imports: str = "") -> str:
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return (
        imports + KERNEL + "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n" + lines
    )


def rules(source: str, **kwargs: object) -> list[str]:
    return [f.rule for f in screen_source(source, **kwargs).findings]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "candidate.py").exists())
)
def test_screen_passes_every_example_candidate(example: str) -> None:
    report = screen_source((EXAMPLES / example / "candidate.py").read_text())
    assert report.passed, report.findings
    assert report.kernel_kinds == ("triton",)
    assert report.entry_class == "ModelNew"


@pytest.mark.parametrize(
    ("body", "snippet"),
    [
        ("return torch.rsqrt(x)", "torch.rsqrt"),
        ("return torch.nn.functional.softmax(x, -1)", "torch.nn.functional.softmax"),
        ("return F.silu(x)", "F.silu"),
        ("return x.float()", ".float()"),
        ("return x.sum(-1)", ".sum()"),
        ("return x @ x", "'@'"),
        ("return th.exp(x)", "th.exp"),
    ],
)
def test_screen_rejects_torch_compute_in_forward(body: str, snippet: str) -> None:
    imports = "import torch.nn.functional as F\nimport torch as th\n"
    report = screen_source(_forward(body, imports))
    finding = next(f for f in report.findings if f.rule == "torch-compute-in-forward")
    assert snippet in finding.message
    assert finding.line == len((imports + KERNEL).splitlines()) + 3


def test_screen_follows_helpers_called_from_forward() -> None:
    source = KERNEL + (
        "def helper(x):\n    return torch.exp(x)\n\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def _inner(self, x):\n        return helper(x)\n"
        "    def forward(self, x):\n        return self._inner(x)\n"
    )
    findings = screen_source(source).findings
    assert [f.rule for f in findings] == ["torch-compute-in-forward"]
    assert "helper()" in findings[0].message


def test_screen_allows_allocation_and_launch_glue() -> None:
    body = (
        "y = torch.empty_like(x)\nn = triton.cdiv(x.shape[0], 4)\n"
        "z = x.view(-1).contiguous()\n_k[(n,)](y)\nreturn y"
    )
    assert rules(_forward(body)) == []


def test_screen_ignores_math_outside_the_hot_path() -> None:
    source = (
        _forward("return x") + "\ndef make_table():\n    return torch.arange(10).float().exp()\n"
    )
    assert rules(source) == []


def test_screen_requires_a_kernel() -> None:
    assert "no-kernel" in rules(fixture_candidate("rms_norm_no_kernel.py"))


def test_screen_accepts_load_inline_as_a_kernel() -> None:
    source = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        "mod = load_inline(name='m', cpp_sources='', cuda_sources='')\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return mod.run(x)\n"
    )
    report = screen_source(source)
    assert report.passed
    assert report.kernel_kinds == ("cuda",)


def test_screen_rejects_reference_use() -> None:
    assert "reference-use" in rules("from reference import Model\n" + _forward("return x"))
    assert "reference-use" in rules(_forward("return Model()(x)"))
    subclass = KERNEL + "class ModelNew(Model):\n    def forward(self, x):\n        return x\n"
    assert "reference-use" in rules(subclass)


def test_screen_rejects_dynamic_code() -> None:
    findings = screen_source(_forward("exec('y = 1')\nreturn eval('x')")).findings
    assert [(f.rule, f.line) for f in findings] == [("dynamic-code", 11), ("dynamic-code", 12)]


def test_screen_requires_modelnew() -> None:
    assert rules(KERNEL + "class Other:\n    pass\n") == ["no-entry"]


def test_screen_allow_list_waives_a_rule() -> None:
    source = _forward("return x.float()")
    assert rules(source, allow=["torch-compute-in-forward"]) == []
    assert rules(source, allow=["torch-compute-in-forward:.float()"]) == []
    assert rules(source, allow=["torch-compute-in-forward:.sum()"]) == ["torch-compute-in-forward"]


def test_screen_raises_syntax_error() -> None:
    with pytest.raises(SyntaxError):
        screen_source(fixture_candidate("rms_norm_syntax.py"))


def test_screen_rejects_torch_fallback_fixture() -> None:
    assert "torch-compute-in-forward" in rules(fixture_candidate("rms_norm_torch_fallback.py"))
