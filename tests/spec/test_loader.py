"""load_problem: the three formats, detection, and the errors a person gets for a broken file."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from aka.core import SpecError
from aka.spec import (
    Phase,
    ProblemFormat,
    Split,
    detect_format,
    load_problem,
    parse_op_yaml_text,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "configs" / "examples").glob("*/op.yaml"))
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "problems"
ATREX_FIXTURE = FIXTURES / "atrex_rms_norm"
KERNELBENCH_FIXTURE = FIXTURES / "kernelbench_softmax.py"
EXPECTED_EXAMPLES = {
    "fp8_quant",
    "fused_add_rms_norm",
    "gemm_bf16",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "softmax",
}


def _spec_error(path: Path | str, *fragments: str, format: str | None = None) -> SpecError:
    """Load ``path``, expect a SpecError naming the file and every fragment, on one line."""
    with pytest.raises(SpecError) as info:
        load_problem(path, format)
    err = info.value
    text = str(err)
    assert Path(path).name in text, f"file not named in: {text}"
    missing = [f for f in fragments if f not in text]
    assert missing == [], f"{missing} not in: {text}"
    assert "\n" not in text, f"the CLI prints one line; got: {text!r}"
    assert err.code == "spec.invalid"
    return err


# ------------------------------------------------------------------------------------ examples


def test_examples_all_present() -> None:
    assert {p.parent.name for p in EXAMPLES} >= EXPECTED_EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_examples_load(path: Path) -> None:
    problem = load_problem(path)

    assert problem.format is ProblemFormat.OP_YAML
    assert problem.name == path.parent.name
    assert problem.source_path == str(path)
    assert problem.input_fn == "_make_inputs"
    assert problem.input_style == "kwargs"
    assert problem.inputs_take_device
    assert problem.forward_params, "forward's parameters were not read"
    assert problem.op_family is not None
    assert "class Model" in problem.reference_code
    splits = {s.split for s in problem.shapes}
    assert Split.SMOKE in splits, "every example needs smoke shapes for the CPU interpreter"
    assert Split.TUNE in splits
    assert all(s.phase is not None for s in problem.shapes if s.split is Split.TUNE)


# ----------------------------------------------------------------------------------- detection


def test_detect_format_op_yaml_by_suffix(tmp_path: Path) -> None:
    for name in ("op.yaml", "spec.yml", "UPPER.YAML"):
        (tmp_path / name).write_text("name: x\n")
        assert detect_format(tmp_path / name) is ProblemFormat.OP_YAML


def test_detect_format_atrex_directory() -> None:
    assert detect_format(ATREX_FIXTURE) is ProblemFormat.ATREX


def test_detect_format_kernelbench_py() -> None:
    assert detect_format(KERNELBENCH_FIXTURE) is ProblemFormat.KERNELBENCH


def test_load_problem_format_override(tmp_path: Path, write_spec) -> None:
    kernelbench_txt = tmp_path / "softmax_problem.txt"
    shutil.copy(KERNELBENCH_FIXTURE, kernelbench_txt)
    op_yaml_txt = write_spec(name="spec.txt")

    as_kernelbench = load_problem(kernelbench_txt, format="kernelbench")
    as_op_yaml = load_problem(op_yaml_txt, format=ProblemFormat.OP_YAML)

    assert as_kernelbench.format is ProblemFormat.KERNELBENCH
    assert as_op_yaml.format is ProblemFormat.OP_YAML
    assert [s.id for s in as_op_yaml.shapes] == ["a", "b"]
    with pytest.raises(SpecError, match="unknown problem format"):
        load_problem(op_yaml_txt)  # without the override a .txt is not detected


def test_load_problem_unknown_format_override(write_spec) -> None:
    err = _spec_error(write_spec(), "--format", "'bogus'", "use one of", format="bogus")

    assert err.field == "--format"


# ----------------------------------------------------------------------------------- Atrex-Bench


def test_atrex_fixture_loads_with_phase_inputs_and_init_kwargs() -> None:
    problem = load_problem(ATREX_FIXTURE)

    assert problem.format is ProblemFormat.ATREX
    assert problem.name == "atrex_rms_norm"
    assert [s.id for s in problem.shapes] == ["0", "1", "2"]
    assert all(s.phase is Phase.DECODE for s in problem.shapes)
    assert all(s.split is Split.TUNE and s.weight == 1.0 for s in problem.shapes)
    assert [s.init_kwargs for s in problem.shapes] == [{"eps": 1e-6}, {"eps": 1e-6}, {"eps": 1e-5}]
    assert problem.shapes[1].input_kwargs == {"token_count": 53, "hidden_size": 7168}
    # _make_inputs lives in input.py, not in the reference
    assert problem.input_fn == "_make_inputs"
    assert problem.inputs_code is not None and "def _make_inputs" in problem.inputs_code
    assert "_make_inputs" not in problem.reference_code
    assert problem.inputs_take_device
    assert problem.init_params == ["eps"]
    assert problem.forward_params == ["x", "weight"]


@pytest.mark.parametrize(
    ("metadata", "phase"),
    [
        ({"phase": "prefill"}, Phase.PREFILL),
        ({"phase": "prefill/decode"}, Phase.MIXED),
        (None, Phase.MIXED),
    ],
)
def test_atrex_phase_from_metadata(tmp_path: Path, metadata: dict | None, phase: Phase) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "op")
    if metadata is None:
        (directory / "metadata.json").unlink()
    else:
        (directory / "metadata.json").write_text(json.dumps(metadata))

    problem = load_problem(directory)

    assert {s.phase for s in problem.shapes} == {phase}


def test_atrex_init_kwargs_must_match_model_init(tmp_path: Path) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "atrex_bad_init")
    shapes = json.loads((directory / "shapes.json").read_text())
    shapes["1"]["init_kwargs"] = {"epsilon": 1e-6}
    (directory / "shapes.json").write_text(json.dumps(shapes))

    _spec_error(
        directory, "shapes[1].init_kwargs", "'epsilon'", "Model.__init__", "rename or remove"
    )


def test_atrex_bad_shapes_json_is_a_spec_error(tmp_path: Path) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "atrex_bad_json")
    (directory / "shapes.json").write_text('{"0": {"input_kwargs": ')

    _spec_error(directory, "shapes.json", "cannot parse shapes", "fix the JSON")


def test_atrex_bad_shape_entries_all_named(tmp_path: Path) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "atrex_bad_entries")
    shapes = {"0": {"input_kwargs": {"token_count": 1}, "weight": "heavy"}, "1": 5}
    (directory / "shapes.json").write_text(json.dumps(shapes))

    err = _spec_error(
        directory, "shape '0'", "'weight'", "'heavy'", "shape '1'", "must be a mapping"
    )

    assert err.message.count("shapes.json") == 1, "the file is named once, not per shape"


def test_atrex_syntax_error_names_reference_file(tmp_path: Path) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "atrex_syntax")
    (directory / "reference.py").write_text(
        "class Model:\n    def forward(self, x)\n        pass\n"
    )

    _spec_error(directory, "reference.py", "syntax error at line 2", "fix the code")


# ----------------------------------------------------------------------------------- KernelBench


def test_kernelbench_fixture_has_one_default_shape() -> None:
    problem = load_problem(KERNELBENCH_FIXTURE)

    assert problem.format is ProblemFormat.KERNELBENCH
    assert problem.name == "kernelbench_softmax"
    assert [s.id for s in problem.shapes] == ["default"]
    assert problem.shapes[0].input_kwargs == {} and problem.shapes[0].init_kwargs == {}
    assert problem.input_style == "kernelbench"
    assert problem.input_fn == "get_inputs"
    assert problem.inputs_code is None
    assert problem.forward_params == ["x"]


def test_kernelbench_without_get_inputs(tmp_path: Path) -> None:
    path = tmp_path / "kb_no_inputs.py"
    text = KERNELBENCH_FIXTURE.read_text().replace("def get_inputs", "def make_some_inputs")
    path.write_text(text)

    _spec_error(path, "get_inputs()", "add it")


# ----------------------------------------------------------------------------- op.yaml features


def test_op_yaml_shapes_from_atrex_style_json(write_spec, tmp_path: Path) -> None:
    shapes = {
        "small": {"input_kwargs": {"tokens": 2, "hidden": 64}, "split": "smoke"},
        "big": {"init_kwargs": {"eps": 1e-5}, "input_kwargs": {"tokens": 64, "hidden": 4096}},
    }
    (tmp_path / "shapes.json").write_text(json.dumps(shapes))

    problem = load_problem(write_spec({"shapes": {"path": "shapes.json"}}))

    assert [(s.id, s.split) for s in problem.shapes] == [
        ("small", Split.SMOKE),
        ("big", Split.TUNE),
    ]
    assert problem.shapes[1].init_kwargs == {"eps": 1e-5}


def test_op_yaml_shapes_from_yaml_list(write_spec, tmp_path: Path) -> None:
    (tmp_path / "shapes.yaml").write_text(
        "- {id: one, input_kwargs: {tokens: 1, hidden: 8}, weight: 2, phase: decode}\n"
        "- {id: two, input_kwargs: {tokens: 9, hidden: 8}, split: holdout}\n"
    )

    problem = load_problem(write_spec({"shapes": {"path": "shapes.yaml"}}))

    assert [(s.id, s.weight, s.phase, s.split) for s in problem.shapes] == [
        ("one", 2.0, Phase.DECODE, Split.TUNE),
        ("two", 1.0, None, Split.HOLDOUT),
    ]


def test_op_yaml_inputs_from_separate_file(write_spec, tmp_path: Path, reference_text: str) -> None:
    model_only, make_inputs = reference_text.split("\n\ndef _make_inputs", 1)
    (tmp_path / "inputs.py").write_text("import torch\n\ndef _make_inputs" + make_inputs)

    problem = load_problem(write_spec({"inputs": {"path": "inputs.py"}}, reference=model_only))

    assert problem.inputs_code is not None and "_make_inputs" in problem.inputs_code
    assert problem.inputs_take_device


def test_op_yaml_make_inputs_without_device(write_spec, reference_text: str) -> None:
    reference = reference_text.replace(', device: str = "cuda"', "").replace(", device=device", "")

    problem = load_problem(write_spec(reference=reference))

    assert not problem.inputs_take_device


def test_op_yaml_make_inputs_alias(write_spec, reference_text: str) -> None:
    problem = load_problem(
        write_spec(reference=reference_text.replace("_make_inputs", "make_inputs"))
    )

    assert problem.input_fn == "make_inputs"


def test_parse_op_yaml_text_self_contained(reference_text: str) -> None:
    text = textwrap.dedent(
        """\
        name: inline
        reference:
          code: |
        {code}
        shapes:
          cases: [{{id: a, input_kwargs: {{tokens: 1, hidden: 8}}}}]
        """
    ).format(code=textwrap.indent(reference_text, "    "))

    problem = parse_op_yaml_text(text, base_dir=None, source="<request>")

    assert problem.reference_code == reference_text
    assert problem.source_path == "<request>"
    assert problem.forward_params == ["x", "weight"]


def test_parse_op_yaml_text_self_contained_rejects_paths() -> None:
    text = "name: x\nreference: {path: reference.py}\nshapes: {cases: [{id: a}]}\n"

    with pytest.raises(SpecError, match="cannot use 'path'; inline it") as info:
        parse_op_yaml_text(text, base_dir=None, source="<request>")

    assert info.value.field == "reference.path"
    assert "<request>" in str(info.value)


def test_op_yaml_guard_fields_reach_the_problem(write_spec) -> None:
    changes = {
        "op_family": "norm",
        "screen_allow": ["torch-compute:rsqrt"],
        "engagement_min": 0.75,
        "in_place": ["x"],
        "fp8_scales": {"0": "1"},
        "tolerance": {"atol": 0.01, "rtol": 0.02, "reason": "fp32 accumulation order"},
        "dtype_policy": {"match_output_dtype": False, "allow_tf32": True},
        "roofline": [{"shapes": ["a"], "bytes_read": "tokens * hidden * 2", "reason": "padding"}],
        "dsl": ["triton"],
        "baselines": ["eager"],
    }

    problem = load_problem(write_spec(changes))

    assert problem.screen_allow == ["torch-compute:rsqrt"]
    assert problem.engagement_min == 0.75
    assert problem.in_place == ["x"]
    assert problem.fp8_scales == {"0": "1"}
    assert problem.tolerance is not None and problem.tolerance.rtol == 0.02
    assert problem.dtype_policy.allow_tf32 and not problem.dtype_policy.match_output_dtype
    assert [o.shapes for o in problem.roofline_overrides_for("a")] == [["a"]]
    assert problem.roofline_overrides_for("b") == []
    assert [d.value for d in problem.dsl] == ["triton"]
    assert problem.baselines == ["eager"]


# ------------------------------------------------------------------------------- bad input: files


def test_missing_file(tmp_path: Path) -> None:
    _spec_error(tmp_path / "nope.yaml", "no such file", "check the path")


def test_directory_without_reference(tmp_path: Path) -> None:
    directory = tmp_path / "half_atrex"
    directory.mkdir()
    (directory / "shapes.json").write_text("{}")

    _spec_error(directory, "needs reference.py and shapes.json")


def test_unknown_suffix(tmp_path: Path) -> None:
    path = tmp_path / "problem.toml"
    path.write_text("name = 'x'\n")

    _spec_error(path, "unknown problem format", "pass --format")


def test_yaml_syntax_error(write_spec) -> None:
    path = write_spec(text="name: x\nreference: {path: reference.py\nshapes: {}\n")

    _spec_error(path, "not valid YAML", "line 3", "fix the syntax")


def test_top_level_not_a_mapping(write_spec) -> None:
    _spec_error(write_spec(text="- name\n- reference\n"), "top level must be a mapping", "got list")


# ------------------------------------------------------------------------------ bad input: schema


@pytest.mark.parametrize(
    ("typo", "value"),
    [("shape", {"cases": []}), ("tolerence", {"atol": 0.1, "reason": "r"})],
)
def test_unknown_key(write_spec, typo: str, value: dict) -> None:
    _spec_error(write_spec({typo: value}), f"field '{typo}'", "unknown key", "check its spelling")


def test_wrong_type(write_spec) -> None:
    cases = [{"id": "a", "weight": "heavy", "input_kwargs": {"tokens": 1, "hidden": 8}}]

    _spec_error(
        write_spec({"shapes": {"cases": cases}}),
        "field 'shapes.cases.0.weight' (shape 'a')",
        "'heavy'",
        "fix the value",
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("reference", {"path": "reference.py", "code": "x = 1"}, "one of 'path' or 'code'"),
        ("reference", {}, "one of 'path' or 'code'"),
        ("shapes", {"path": "s.json", "cases": []}, "one of 'path' or 'cases'"),
    ],
)
def test_exactly_one_of_path_and_code(write_spec, field: str, value: dict, expected: str) -> None:
    _spec_error(write_spec({field: value}), f"field '{field}'", "give exactly " + expected)


def test_missing_required_reference(write_spec) -> None:
    _spec_error(write_spec(drop=("reference",)), "field 'reference'", "required; add it")


def test_relative_path_not_found(write_spec) -> None:
    err = _spec_error(
        write_spec({"reference": {"path": "models/nope.py"}}), "'models/nope.py'", "fix the path"
    )

    assert err.field == "reference.path"


def test_shapes_path_not_found(write_spec) -> None:
    err = _spec_error(write_spec({"shapes": {"path": "shapes.json"}}), "'shapes.json'", "not found")

    assert err.field == "shapes.path"


def test_roofline_needs_a_reason(write_spec) -> None:
    _spec_error(
        write_spec({"roofline": [{"bytes_read": 4}]}), "field 'roofline.0.reason'", "required"
    )


# ------------------------------------------------------------------------ bad input: consistency


def _cases(*cases: dict) -> dict:
    return {"shapes": {"cases": list(cases)}}


def test_input_kwargs_unknown_to_make_inputs(write_spec) -> None:
    case = {"id": "a", "input_kwargs": {"tokens": 1, "hidden": 8, "bogus": 3}}

    _spec_error(
        write_spec(_cases(case)),
        "shapes[a].input_kwargs",
        "takes no parameter 'bogus'",
        "rename or remove",
    )


def test_input_kwargs_missing_required_parameter(write_spec) -> None:
    case = {"id": "a", "input_kwargs": {"tokens": 1}}

    _spec_error(write_spec(_cases(case)), "shapes[a].input_kwargs", "needs 'hidden'", "add it")


def test_init_kwargs_not_matching_model_init(write_spec) -> None:
    case = {"id": "a", "init_kwargs": {"epsilon": 1e-5}, "input_kwargs": {"tokens": 1, "hidden": 8}}

    _spec_error(
        write_spec(_cases(case)), "shapes[a].init_kwargs", "Model.__init__", "'epsilon'", "rename"
    )


def test_init_kwargs_missing_required(write_spec, reference_text: str) -> None:
    reference = reference_text.replace("eps: float = 1e-6", "eps: float")

    _spec_error(write_spec(reference=reference), "shapes[a].init_kwargs", "needs 'eps'", "add it")


def test_no_class_model(write_spec, reference_text: str) -> None:
    reference = reference_text.replace("class Model(", "class Net(")

    _spec_error(write_spec(reference=reference), "reference", "class Model", "add it")


def test_model_without_forward(write_spec, reference_text: str) -> None:
    reference = reference_text.replace("def forward(", "def compute(")

    _spec_error(write_spec(reference=reference), "reference", "no forward()", "add one")


def test_no_make_inputs(write_spec, reference_text: str) -> None:
    reference = reference_text.replace("def _make_inputs(", "def build(")

    _spec_error(write_spec(reference=reference), "inputs", "_make_inputs", "define one")


def test_inputs_file_must_define_make_inputs(write_spec, tmp_path: Path) -> None:
    # the worker takes _make_inputs from the inputs code when there is one, not the reference
    (tmp_path / "inputs.py").write_text("def helper(tokens, hidden):\n    return {}\n")

    _spec_error(
        write_spec({"inputs": {"path": "inputs.py"}}),
        "no _make_inputs",
        "inputs.py",
        "define one",
    )


def test_atrex_input_py_without_make_inputs(tmp_path: Path) -> None:
    directory = shutil.copytree(ATREX_FIXTURE, tmp_path / "atrex_no_inputs")
    (directory / "input.py").write_text("def build(token_count, hidden_size):\n    return {}\n")

    _spec_error(directory, "no _make_inputs", "input.py", "define one")


def test_duplicate_shape_ids(write_spec) -> None:
    case = {"id": "a", "input_kwargs": {"tokens": 1, "hidden": 8}}

    _spec_error(write_spec(_cases(case, case)), "shapes", "'a' appears twice", "make ids unique")


def test_no_shapes(write_spec) -> None:
    _spec_error(write_spec(_cases()), "shapes", "none given", "add at least one")


def test_in_place_names_a_non_parameter(write_spec) -> None:
    _spec_error(write_spec({"in_place": ["out"]}), "in_place", "'out'", "remove it")


def test_roofline_unknown_shape_id(write_spec) -> None:
    roofline = [{"shapes": ["zz"], "bytes_read": 4, "reason": "r"}]

    _spec_error(write_spec({"roofline": roofline}), "roofline[0].shapes", "'zz'", "use ids")


def test_roofline_unknown_name(write_spec) -> None:
    roofline = [{"bytes_written": "tokens * hiden * 2", "reason": "r"}]

    _spec_error(
        write_spec({"roofline": roofline}),
        "roofline[0] on shape 'a'",
        "'hiden'",
        "use one of the shape's kwargs",
    )


def test_roofline_disallowed_syntax_is_not_run(write_spec, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    expression = f"__import__('os').system('touch {marker}')"
    roofline = [{"flops_by_unit": {"vector_fp32": expression}, "reason": "r"}]

    _spec_error(write_spec({"roofline": roofline}), "roofline[0]", "is not allowed")

    assert not marker.exists()


@pytest.mark.parametrize(
    ("reference", "inline"), [(True, False), (False, True)], ids=["path", "inline"]
)
def test_reference_syntax_error_has_line_number(
    write_spec, reference_text: str, reference: bool, inline: bool
) -> None:
    broken = reference_text.replace("def forward(self, x, weight):", "def forward(self, x, weight)")
    line = broken.splitlines().index("    def forward(self, x, weight)") + 1
    changes = {"reference": {"code": broken}} if inline else None

    err = _spec_error(
        write_spec(changes, reference=None if inline else broken),
        f"syntax error at line {line}",
        "fix the code",
    )

    assert err.field == ("reference.code" if inline else "reference.path")
    if not inline:
        assert "reference.py" in err.message.split("field")[-1]


def test_several_errors_in_one_spec_error(write_spec) -> None:
    cases = [
        {"id": "a", "input_kwargs": {"tokens": 1}},
        {"id": "b", "input_kwargs": {"hidden": 8, "bogus": 0}},
    ]

    err = _spec_error(write_spec({"shapes": {"cases": cases}, "in_place": ["out"]}))

    for fragment in ("shapes[a]", "needs 'hidden'", "shapes[b]", "'bogus'", "in_place"):
        assert fragment in err.message


def test_several_schema_errors_in_one_spec_error(write_spec) -> None:
    cases = [
        {"id": "a", "weight": "heavy", "input_kwargs": {"tokens": 1, "hidden": 8}},
        {"id": "b", "split": "train", "input_kwargs": {"tokens": 1, "hidden": 8}},
    ]

    _spec_error(
        write_spec({"shapes": {"cases": cases}, "engagement_min": 2}),
        "(shape 'a')",
        "'heavy'",
        "(shape 'b')",
        "'train'",
        "field 'engagement_min'",
    )
