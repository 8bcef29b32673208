"""Scorer.input_signature: how a problem's reference is called, described by a reference worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.bench import InputSignature, Scorer
from aka.bench.problem_runtime import ProblemRuntime
from aka.bench.signature import describe_reference, dtype_name
from aka.core import BaselineError, BenchConfig, SpecError
from aka.spec import load_problem, parse_op_yaml_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
FIXTURES = REPO / "tests" / "fixtures" / "problems"
SUITE = REPO / "configs" / "suites" / "atrex30"


def _describe(path: Path, shape_id: str, tmp_path: Path) -> InputSignature:
    """The worker-side half, run in this process (cheap: no subprocess)."""
    problem = load_problem(path)
    rt = ProblemRuntime.load(problem.to_worker_json(), tmp_path, "cpu")
    shape = next(s for s in problem.shapes if s.id == shape_id)
    return InputSignature.model_validate(describe_reference(rt, shape.model_dump(mode="json"), 0))


def test_signature_from_the_worker_describes_args_init_values_and_outputs(
    cpu_scorer: Scorer,
) -> None:
    sig = cpu_scorer.input_signature(load_problem(EXAMPLES / "rotary_embedding" / "op.yaml"))
    assert sig.shape_id == "smoke_t33_h4_kv2"  # the first smoke shape on the CPU
    assert sig.device == "cpu"
    assert [(a.name, a.kind, a.shape, a.dtype) for a in sig.forward_args] == [
        ("positions", "tensor", [33], "int64"),
        ("q", "tensor", [33, 4 * 128], "bf16"),
        ("k", "tensor", [33, 2 * 128], "bf16"),
        ("cos_sin_cache", "tensor", [512, 128], "fp32"),
    ]
    assert sig.forward_args[1].stride == [512, 1]
    (head_dim,) = sig.init_args
    assert (head_dim.name, head_dim.kind, head_dim.value, head_dim.provided) == (
        "head_dim",
        "scalar",
        128,
        True,
    )
    assert sig.init_params_text == "self, head_dim=128"
    assert sig.forward_params_text == "self, positions, q, k, cos_sin_cache"
    assert sig.output_kind == "tuple"
    assert [(o.name, o.shape, o.dtype) for o in sig.outputs] == [
        ("0", [33, 512], "bf16"),
        ("1", [33, 256], "bf16"),
    ]


def test_signature_of_a_named_shape_uses_its_init_kwargs(cpu_scorer: Scorer) -> None:
    sig = cpu_scorer.input_signature(
        load_problem(EXAMPLES / "rotary_embedding" / "op.yaml"), "smoke_t7_h5_kv1_d80_rot32"
    )
    assert sig.shape_id == "smoke_t7_h5_kv1_d80_rot32"
    assert sig.init_args[0].value == 80
    assert sig.forward_args[3].shape == [512, 32]


def test_signature_rejects_an_unknown_shape(cpu_scorer: Scorer) -> None:
    with pytest.raises(SpecError, match="nope"):
        cpu_scorer.input_signature(load_problem(EXAMPLES / "rms_norm" / "op.yaml"), "nope")


def test_signature_of_a_failing_reference_is_a_baseline_error(
    cpu_scorer: Scorer, tmp_path: Path
) -> None:
    text = """
name: broken
reference:
  code: |
    import torch
    class Model(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("reference exploded")
    def _make_inputs(n):
        return {"x": torch.ones(n)}
shapes: {cases: [{id: s, input_kwargs: {n: 3}, split: smoke}]}
"""
    problem = parse_op_yaml_text(text, base_dir=tmp_path, source="broken.yaml")
    with pytest.raises(BaselineError, match="reference exploded"):
        cpu_scorer.input_signature(problem)


def test_describe_reference_lists_weights_and_init_values(tmp_path: Path) -> None:
    sig = _describe(FIXTURES / "scaled_rows" / "op.yaml", "smoke_r7_h100", tmp_path)
    assert [(a.name, a.value, a.type_name) for a in sig.init_args] == [("hidden", 100, "int")]
    assert [(p.name, p.shape, p.dtype, p.kind) for p in sig.parameters] == [
        ("scale", [100], "fp32", "parameter")
    ]
    assert sig.output_kind == "tensor" and sig.outputs[0].shape == [7, 100]


def test_describe_reference_keeps_a_list_init_argument(tmp_path: Path) -> None:
    # mrope's sections are a list; dropped as 'other', every kernel got its default sections
    sig = _describe(SUITE / "mrope" / "op.yaml", "smoke_partial_rotary", tmp_path)
    section = next(a for a in sig.init_args if a.name == "mrope_section")
    assert (section.kind, section.value, section.type_name) == ("sequence", [16, 8, 8], "list")
    assert sig.init_params_text.startswith("self, head_size=128, rotary_dim=128, mrope_section=")


def test_describe_reference_carries_the_problems_in_place_inputs(tmp_path: Path) -> None:
    sig = _describe(SUITE / "reshape_and_cache" / "op.yaml", "smoke_one_token", tmp_path)
    assert sig.in_place == ["key_cache", "value_cache"]
    functional = _describe(SUITE / "mrope" / "op.yaml", "smoke_gqa_tokens", tmp_path)
    assert functional.in_place == []


def test_describe_reference_names_kernelbench_positional_inputs(tmp_path: Path) -> None:
    sig = _describe(FIXTURES / "kernelbench_softmax.py", "default", tmp_path)
    assert [(a.name, a.shape, a.dtype) for a in sig.forward_args] == [("x", [16, 16384], "fp32")]
    assert sig.init_args == [] and sig.init_params_text == "self"


def test_dtype_names_are_the_spec_short_names() -> None:
    import torch

    assert [dtype_name(d) for d in (torch.bfloat16, torch.float8_e4m3fn, torch.int32)] == [
        "bf16",
        "fp8_e4m3fn",
        "int32",
    ]
    assert dtype_name(torch.complex64) == "complex64"


def test_a_gpu_signature_prefers_the_first_tune_shape(tmp_path: Path) -> None:
    from aka.bench.signature import _pick_shape

    scorer = Scorer(BenchConfig(), tmp_path, device="cpu")
    scorer.mode = "gpu"  # shape choice only: nothing runs
    problem = load_problem(FIXTURES / "rmsnorm_renamed" / "op.yaml")
    assert _pick_shape(scorer, problem, None).id == "b4_s512_h4096"
    scorer.mode = "cpu_interpreter"
    assert _pick_shape(scorer, problem, None).id == "smoke_b2_s3_h999"
