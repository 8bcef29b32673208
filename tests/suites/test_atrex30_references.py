"""The atrex30 suite's operator references (issue #6, point 1), checked on the CPU.

Each operator of ``configs/suites/atrex30/<op>/reference.py`` (written here from a paraphrase of
the upstream semantics) must keep the upstream names (``configs/suites/atrex30/upstream/``, the
Atrex-Bench data verbatim) (forward's
parameters are the metadata's inputs; ``_make_inputs`` takes every shapes.json ``input_kwargs``
key; ``Model`` every ``init_kwargs`` key), declare its family, 1-3 smoke cases and, for
"prefill/decode" operators, a phase rule that gives every tune shape a phase; and on its smoke
cases it must run on the CPU with finite outputs that an all-zero or a constant output cannot
match within the scorer's tolerance.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from aka.bench import compare_outputs
from aka.bench.correctness import Tolerance
from aka.bench.problem_runtime import flatten_outputs, load_module
from aka.spec.vocab import OpFamily

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suites" / "atrex30"
UPSTREAM = SUITE / "upstream"
OPS = sorted(p.parent.name for p in SUITE.glob("*/reference.py"))


def _module(op: str) -> types.ModuleType:
    name = f"_atrex30_{op}"
    return sys.modules.get(name) or load_module(name, SUITE / op / "reference.py")


def _upstream(op: str) -> tuple[dict[str, Any], dict[str, Any]]:
    shapes = json.loads((UPSTREAM / op / "shapes.json").read_text())
    meta = json.loads((UPSTREAM / op / "metadata.json").read_text())
    return shapes, meta


@pytest.mark.parametrize("op", OPS)
def test_reference_keeps_the_upstream_contract(op: str) -> None:
    module = _module(op)
    shapes, meta = _upstream(op)
    assert module.__doc__ and len(module.__doc__.strip().splitlines()) >= 3, "document it"
    assert OpFamily(module.OP_FAMILY)
    forward = list(inspect.signature(module.Model.forward).parameters)[1:]
    assert forward == list(meta["input_dtypes"]), (forward, list(meta["input_dtypes"]))
    make = inspect.signature(module._make_inputs)
    init = inspect.signature(module.Model.__init__)
    for sid, case in shapes.items():
        make.bind(**(case.get("input_kwargs") or {}), device="cpu")
        init.bind(None, **(case.get("init_kwargs") or {}))
        if meta["phase"] == "prefill/decode":
            assert module.phase_of(**case["input_kwargs"]) in ("prefill", "decode"), sid
    if meta["phase"] == "prefill/decode":
        phases = {module.phase_of(**c["input_kwargs"]) for c in shapes.values()}
        assert phases, op
    assert 1 <= len(module.SMOKE) <= 3
    assert all(c["id"].startswith("smoke_") for c in module.SMOKE)


def _zero_and_constant(ref: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each output in turn replaced by zeros and by a constant (the others kept right)."""
    import torch

    variants = []
    for key, t in ref["tensors"].items():
        for fill in ("zero", "constant"):
            if t.is_floating_point():
                value = 0.0 if fill == "zero" else float(t.float().mean())
                fake = torch.full_like(t, value)
            else:
                fake = torch.zeros_like(t) if fill == "zero" else torch.full_like(t, 1)
            tensors = dict(ref["tensors"]) | {key: fake}
            variants.append((f"{fill} {key}", {**ref, "tensors": tensors}))
    return variants


@pytest.mark.parametrize("op", OPS)
def test_smoke_cases_run_and_reject_zero_or_constant_outputs(op: str) -> None:
    import torch

    module = _module(op)
    for case in module.SMOKE:
        torch.manual_seed(0)
        model = module.Model(**(case.get("init_kwargs") or {}))
        inputs = module._make_inputs(**case["input_kwargs"], device="cpu")
        with torch.no_grad():
            out = model(**inputs)
        structure, tensors = flatten_outputs(out)
        ref = {"structure": structure, "tensors": tensors, "extra": {}}
        where = f"{op}/{case['id']}"
        for key, t in tensors.items():
            if t.is_floating_point():  # -inf is a legitimate value (masked logits); NaN never
                assert not torch.isnan(t.float()).any(), f"{where}: output {key} holds NaN"
        for what, fake in _zero_and_constant(ref):
            outcome = compare_outputs(
                fake, ref, fp8_scales=_fp8_scales(module), cpu=True, override=_tolerance(module)
            )
            assert not outcome.ok, f"{where}: output with {what} passes the tolerance"


def _tolerance(module: types.ModuleType) -> Tolerance | None:
    """The operator's own tolerance (``TOLERANCE``), as the scorer builds it from op.yaml."""
    spec = getattr(module, "TOLERANCE", None)
    if spec is None:
        return None
    return Tolerance(spec["atol"], spec["rtol"], spec.get("atol_scale", "absolute"))


def _fp8_scales(module: types.ModuleType) -> dict[str, str]:
    return dict(getattr(module, "FP8_SCALES", {}))
