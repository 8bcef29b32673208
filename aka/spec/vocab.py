"""Closed vocabularies shared by specs, results and the knowledge base (STYLE T2).

Must not import torch: dtypes are named here by string and mapped to torch inside workers.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "TORCH_DTYPE_NAMES",
    "Arch",
    "ComputeUnit",
    "DType",
    "Dsl",
    "OpFamily",
    "Phase",
    "ProblemFormat",
    "Split",
    "Vendor",
]


class Vendor(StrEnum):
    """GPU vendor."""

    NVIDIA = "nvidia"
    AMD = "amd"
    ANY = "any"


class Arch(StrEnum):
    """GPU architecture."""

    SM_80 = "sm_80"
    SM_86 = "sm_86"
    SM_89 = "sm_89"
    SM_90 = "sm_90"
    SM_100 = "sm_100"
    GFX942 = "gfx942"
    ANY = "any"


class Dsl(StrEnum):
    """The language a kernel is written in."""

    TRITON = "triton"
    CUDA = "cuda"
    CUTEDSL = "cutedsl"
    GLUON = "gluon"
    ANY = "any"


class OpFamily(StrEnum):
    """Operator families; the agent retrieves reference kernels by family."""

    NORM = "norm"
    ACTIVATION = "activation"
    SOFTMAX = "softmax"
    QUANTIZATION = "quantization"
    ROPE = "rope"
    GEMM = "gemm"
    ATTENTION = "attention"
    MOE = "moe"
    REDUCTION = "reduction"
    ELEMENTWISE = "elementwise"
    CONV = "conv"
    SAMPLING = "sampling"
    CACHE = "cache"
    SCAN = "scan"
    SORT = "sort"
    EMBEDDING = "embedding"
    OTHER = "other"


class Phase(StrEnum):
    """Inference phase a shape belongs to."""

    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


class Split(StrEnum):
    """Who may see a shape: the agent (tune), only the scorer (holdout), or CPU/CI (smoke)."""

    TUNE = "tune"
    HOLDOUT = "holdout"
    SMOKE = "smoke"


class ProblemFormat(StrEnum):
    """On-disk problem formats ``load_problem`` understands."""

    OP_YAML = "op.yaml"
    ATREX = "atrex"
    KERNELBENCH = "kernelbench"


class DType(StrEnum):
    """Tensor dtypes by short name (mapped to torch dtypes in workers)."""

    FP64 = "fp64"
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8_E4M3FN = "fp8_e4m3fn"
    FP8_E5M2 = "fp8_e5m2"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    UINT8 = "uint8"
    BOOL = "bool"


#: Each ``DType``'s torch name (``torch.<name>``); the one table of this mapping in aka.
TORCH_DTYPE_NAMES: dict[DType, str] = {
    DType.FP64: "float64",
    DType.FP32: "float32",
    DType.FP16: "float16",
    DType.BF16: "bfloat16",
    DType.FP8_E4M3FN: "float8_e4m3fn",
    DType.FP8_E5M2: "float8_e5m2",
    DType.INT64: "int64",
    DType.INT32: "int32",
    DType.INT16: "int16",
    DType.INT8: "int8",
    DType.UINT8: "uint8",
    DType.BOOL: "bool",
}


class ComputeUnit(StrEnum):
    """The hardware unit that really executes a FLOP, each priced at its own rate in T_sol."""

    TC_BF16 = "tc_bf16"
    TC_FP16 = "tc_fp16"
    TC_FP8 = "tc_fp8"
    TC_TF32 = "tc_tf32"
    FP32_MATMUL = "fp32_matmul"
    VECTOR_FP32 = "vector_fp32"
