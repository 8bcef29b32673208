"""The atrex30 holdout rules (``configs/suites/atrex30/<op>/holdout.yaml``) fit the references.

For every operator, the shapes generated with seeds 0 and 1 must be ones the reference can build:
``_make_inputs`` runs on the meta device (nothing is allocated) and ``Model(**init_kwargs)``
constructs; the memory expression's input part is within 25% of the real input bytes, and its
output part within 25% of the forward's outputs where the forward runs on meta (operators that
need data on the host, or loop in Python over thousands of tokens, are checked on their smoke
cases on the CPU instead); the phase rule agrees with the reference's ``phase_of`` (or the
operator's fixed phase) on every tune and generated shape. The tune shapes keep the rules, and
each real-model entry is a shape the rules accept.
"""

from __future__ import annotations

import json
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from aka.bench.problem_runtime import load_module
from aka.spec import (
    ProblemSpec,
    Split,
    evaluate_quantity,
    generate_holdout,
    holdout_violations,
    load_suite,
)
from aka.spec.holdout_draw import assign, copy_draft, make_context, read

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suites" / "atrex30"
OPS = sorted(p.parent.name for p in SUITE.glob("*/reference.py"))
CAP = 16 * 2**30  # the default bench.holdout_memory_cap_gb
#: Forwards that meta tensors cannot run (they read data on the host: .tolist(), bincount,
#: boolean indexing) or that loop in Python once per token or chunk (minutes on meta): their
#: output bytes are checked on the smoke cases, on the CPU.
NO_META_FORWARD = {
    "attention_forward",
    "chunk_gated_delta_rule_state",
    "fp8_blockscale_fused_moe",
    "fused_moe",
    "gated_delta_rule_update",
    "mla_decode_attention",
    "moe_align_block_size",
    "moe_count_and_sort",
    "reshape_and_cache",
    "unified_attention",
}
#: _make_inputs quantises every expert in a Python loop: about a second per shape on meta.
SLOW = {"fp8_blockscale_fused_moe"}


@cache
def _problem(op: str) -> ProblemSpec:
    return load_suite("atrex30").problem(op)


def _module(op: str) -> types.ModuleType:
    name = f"_atrex30_{op}"
    return sys.modules.get(name) or load_module(name, SUITE / op / "reference.py")


def _fixed_phase(op: str) -> str:
    return str(json.loads((SUITE / "upstream" / op / "metadata.json").read_text())["phase"])


def _reference_phase(op: str, input_kwargs: dict[str, Any]) -> str:
    fixed = _fixed_phase(op)
    if fixed in ("prefill", "decode"):
        return fixed
    return str(_module(op).phase_of(**input_kwargs))


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    return 0


def _close(expected: float, real: int) -> bool:
    return abs(expected - real) <= 0.25 * real


def _cases() -> list[Any]:
    return [
        pytest.param(op, seed, marks=[pytest.mark.slow] if op in SLOW else [])
        for op in OPS
        for seed in (0, 1)
    ]


@pytest.mark.parametrize(("op", "seed"), _cases())
def test_generated_shapes_build_on_meta_and_match_memory_and_phase(op: str, seed: int) -> None:
    import torch

    problem, module = _problem(op), _module(op)
    assert problem.holdout is not None, f"{op}: write configs/suites/atrex30/{op}/holdout.yaml"
    known = [(s.init_kwargs, s.input_kwargs) for s in problem.shapes]
    cases = generate_holdout(problem, seed, count=8, memory_cap_bytes=CAP)
    assert len(cases) == 8
    for case in cases:
        label = f"{op} {case.id} {case.input_kwargs}"
        names = {**case.init_kwargs, **case.input_kwargs}
        assert holdout_violations(problem, case) == [], label
        assert (case.init_kwargs, case.input_kwargs) not in known, label
        assert problem.holdout.memory.total(names) <= CAP, label
        assert case.phase is not None
        assert case.phase.value == _reference_phase(op, case.input_kwargs), label

        torch.manual_seed(0)
        inputs = module._make_inputs(**case.input_kwargs, device="meta")
        model = module.Model(**case.init_kwargs)
        real_in = _nbytes(inputs)
        expected_in = evaluate_quantity(problem.holdout.memory.inputs, names)
        assert _close(expected_in, real_in), f"{label}: inputs {expected_in} vs {real_in} bytes"
        if op in NO_META_FORWARD:
            continue
        with torch.no_grad():
            out = model.to("meta")(**inputs)
        real_out = _nbytes(out)
        expected_out = evaluate_quantity(problem.holdout.memory.outputs, names)
        assert _close(expected_out, real_out), f"{label}: outputs {expected_out} vs {real_out}"


@pytest.mark.parametrize("op", OPS)
def test_memory_rule_matches_the_smoke_cases_on_the_cpu(op: str) -> None:
    import torch

    problem, module = _problem(op), _module(op)
    assert problem.holdout is not None
    for case in problem.shapes_in({Split.SMOKE}):
        names = {**case.init_kwargs, **case.input_kwargs}
        torch.manual_seed(0)
        inputs = module._make_inputs(**case.input_kwargs, device="cpu")
        real_in = _nbytes(inputs)
        with torch.no_grad():
            real_out = _nbytes(module.Model(**case.init_kwargs)(**inputs))
        expected_in = evaluate_quantity(problem.holdout.memory.inputs, names)
        expected_out = evaluate_quantity(problem.holdout.memory.outputs, names)
        assert _close(expected_in, real_in), f"{op} {case.id}: inputs {expected_in} vs {real_in}"
        assert _close(expected_out, real_out), f"{op} {case.id}: {expected_out} vs {real_out}"


@pytest.mark.parametrize("op", OPS)
def test_tune_shapes_keep_the_rules_and_the_phase_rule(op: str) -> None:
    problem = _problem(op)
    assert problem.holdout is not None
    for shape in problem.shapes_in({Split.TUNE, Split.SMOKE}):
        names = {**shape.init_kwargs, **shape.input_kwargs}
        phase = problem.holdout.phase_rule.phase(names).value
        assert phase == _reference_phase(op, shape.input_kwargs), (op, shape.id)
        if shape.split is Split.TUNE:
            assert holdout_violations(problem, shape) == [], (op, shape.id)


@pytest.mark.parametrize("op", OPS)
def test_every_real_model_entry_is_a_valid_shape(op: str) -> None:
    problem = _problem(op)
    assert problem.holdout is not None
    ctx = make_context(problem, problem.holdout, CAP)
    for entry in problem.holdout.realistic:
        for base in ctx.bases[:3]:
            draft = copy_draft(base)
            for key, value in entry.items():
                assign(draft, key, value)
            ctx.finish(draft)
            assert all(read(draft, k) == v for k, v in entry.items()), entry
            assert ctx.violations(draft) == [], (op, entry)
