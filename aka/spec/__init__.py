"""aka.spec: problem and candidate contracts and their loaders; reads code with ast, runs none."""

from aka.spec.expr import evaluate_quantity
from aka.spec.frontmatter import kernel_header, split_front_matter
from aka.spec.holdout import (
    CATEGORIES,
    HoldoutSpec,
    generate_holdout,
    holdout_seed,
    holdout_violations,
    with_holdout,
)
from aka.spec.kernel_meta import KernelMeta, KernelProblem, KernelSource, MeasuredEntry
from aka.spec.loader import detect_format, load_problem, parse_op_yaml_text
from aka.spec.problem import (
    CodeRef,
    DtypePolicySpec,
    OpYamlSpec,
    ProblemSpec,
    RooflineOverrideSpec,
    ShapeCase,
    ShapesRef,
    ToleranceSpec,
)
from aka.spec.pysource import Signature, SourceFacts, read_source_facts
from aka.spec.schema import op_yaml_json_schema
from aka.spec.suite import SuiteOperator, SuiteSpec, UncoveredOp, builtin_suites, load_suite
from aka.spec.vocab import (
    TORCH_DTYPE_NAMES,
    Arch,
    ComputeUnit,
    Dsl,
    DType,
    OpFamily,
    Phase,
    ProblemFormat,
    Split,
    Vendor,
)

__all__ = [
    "TORCH_DTYPE_NAMES",
    "Arch",
    "CATEGORIES",
    "CodeRef",
    "ComputeUnit",
    "DType",
    "Dsl",
    "DtypePolicySpec",
    "HoldoutSpec",
    "KernelMeta",
    "KernelProblem",
    "KernelSource",
    "MeasuredEntry",
    "OpFamily",
    "OpYamlSpec",
    "Phase",
    "ProblemFormat",
    "ProblemSpec",
    "RooflineOverrideSpec",
    "ShapeCase",
    "ShapesRef",
    "Signature",
    "SourceFacts",
    "Split",
    "SuiteOperator",
    "SuiteSpec",
    "ToleranceSpec",
    "UncoveredOp",
    "Vendor",
    "builtin_suites",
    "detect_format",
    "evaluate_quantity",
    "generate_holdout",
    "holdout_seed",
    "holdout_violations",
    "kernel_header",
    "load_problem",
    "load_suite",
    "op_yaml_json_schema",
    "parse_op_yaml_text",
    "read_source_facts",
    "split_front_matter",
    "with_holdout",
]
