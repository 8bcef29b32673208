"""Reply parsing: the candidate block, the family, the rationale; malformed replies as failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.agent.extract import (
    DEFAULT_FAMILY,
    defines_model_new,
    extract_proposal,
    find_code_blocks,
    normalize_family,
    parse_cited_ids,
    parse_family,
)

MODEL_NEW = """import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""
HELPER = (
    """def launch(kernel, grid):
    # a long helper block that defines no ModelNew
    return kernel[grid]
"""
    * 5
)
ORIGIN = "llm:openai/test"


def test_extract_a_well_formed_reply() -> None:
    reply = (
        "**Family:** Split-K GEMM\n"
        "Knowledge: persistent-rowwise-softmax, `tail-effect`\n"
        "Split K across programs, then reduce in fp32.\n"
        "It fills all SMs for skinny shapes.\n\n"
        f"```python\n{MODEL_NEW}```\n"
    )
    proposal = extract_proposal(reply, origin=ORIGIN, prompt="the prompt", params={"t": 0.5})

    assert proposal.source == MODEL_NEW
    assert proposal.error is None
    assert proposal.family == "split-k-gemm"
    assert proposal.origin == ORIGIN
    assert proposal.params == {"t": 0.5, "kb_cited": ["persistent-rowwise-softmax", "tail-effect"]}
    assert proposal.rationale == (
        "Split K across programs, then reduce in fp32. It fills all SMs for skinny shapes."
    )
    assert (proposal.prompt, proposal.reply) == ("the prompt", reply)


@pytest.mark.parametrize("opening", ["```python", "```py", "```", "```cuda-in-python", "~~~python"])
def test_extract_accepts_every_fence_flavour(opening: str) -> None:
    closing = opening[:3]
    reply = f"Family: rowwise\n{opening}\n{MODEL_NEW}{closing}\n"
    proposal = extract_proposal(reply, origin=ORIGIN)
    assert proposal.source == MODEL_NEW and proposal.error is None


def test_extract_picks_the_block_that_defines_model_new() -> None:
    cpp = "```cpp\n__global__ void k(float* x) { /* class ModelNew is not here */ }\n" * 3 + "```\n"
    reply = f"Family: cuda-rows\n```python\n{HELPER}```\n{cpp}```python\n{MODEL_NEW}```\n"
    proposal = extract_proposal(reply, origin=ORIGIN)
    assert proposal.source == MODEL_NEW
    assert len(find_code_blocks(reply)) == 3


def test_extract_prefers_python_then_the_longest_candidate() -> None:
    longer = MODEL_NEW + "\n\nEXTRA = 1\n"
    text_block = f"```text\n{longer}# padding\n```\n"
    reply = f"```python\n{MODEL_NEW}```\n{text_block}```\n{longer}```\n"
    assert extract_proposal(reply, origin=ORIGIN).source == longer


def test_extract_keeps_a_long_fence_whole() -> None:
    source = MODEL_NEW + 'DOC = """\n```\nnot a fence end\n```\n"""\n'
    reply = f"Family: x\n````python\n{source}````\ntrailing words\n"
    [block] = find_code_blocks(reply)
    assert block.code == source and block.closed
    assert extract_proposal(reply, origin=ORIGIN).rationale == "trailing words"


def test_extract_reads_an_unclosed_final_block() -> None:
    reply = f"Family: x\n```python\n{MODEL_NEW}"
    [block] = find_code_blocks(reply)
    assert not block.closed
    assert extract_proposal(reply, origin=ORIGIN).source == MODEL_NEW


def test_extract_without_a_block_is_a_failed_proposal() -> None:
    reply = "Family: rowwise\nclass ModelNew(torch.nn.Module): ...  (I forgot the fences)"
    proposal = extract_proposal(reply, origin=ORIGIN)
    assert proposal.source is None
    assert proposal.error is not None and "no fenced code block" in proposal.error
    assert proposal.family == "rowwise"
    assert proposal.reply == reply


def test_extract_without_model_new_is_a_failed_proposal() -> None:
    reply = f"```python\n{HELPER}```\n```python\nclass Model(torch.nn.Module):\n    pass\n```\n"
    proposal = extract_proposal(reply, origin=ORIGIN)
    assert proposal.source is None
    assert proposal.error is not None
    assert "2 code block(s)" in proposal.error and "ModelNew" in proposal.error
    assert proposal.family == DEFAULT_FAMILY


def test_extract_of_an_empty_reply() -> None:
    proposal = extract_proposal("  \n", origin=ORIGIN)
    assert proposal.source is None and proposal.error == "the reply is empty"


def test_extract_passes_a_syntax_error_to_the_scorer(repo_root: Path, tmp_path: Path) -> None:
    """A block that defines ModelNew but does not parse becomes the scorer's compile_error."""
    from aka.bench import Scorer, Verdict
    from aka.core import BenchConfig
    from aka.spec import load_problem

    broken = MODEL_NEW.replace("def forward(self, x):", "def forward(self, x)")
    proposal = extract_proposal(f"Family: x\n```python\n{broken}```\n", origin=ORIGIN)
    assert proposal.source == broken and proposal.error is None
    assert defines_model_new(broken)

    problem = load_problem(repo_root / "configs" / "examples" / "rms_norm" / "op.yaml")
    result = Scorer(BenchConfig(), tmp_path, device="cpu").evaluate(problem, proposal.source)
    assert result.verdict is Verdict.COMPILE_ERROR
    assert result.failure is not None and "syntax error at line 5" in result.failure.message


def test_family_parsing_and_normalization() -> None:
    assert normalize_family("  `Persistent Tiles (TMA)` ") == "persistent-tiles-tma"
    assert normalize_family("rms_norm_rowwise") == "rms_norm_rowwise"
    assert normalize_family("***") == DEFAULT_FAMILY
    assert len(normalize_family("x" * 200)) == 60
    assert parse_family("intro\n## Technique family: Two-Pass\nmore") == "two-pass"
    assert parse_family("no family line here") is None
    # a family named inside code does not count: only the prose is searched
    reply = f"```python\n# Family: in-code\n{MODEL_NEW}```\n"
    assert extract_proposal(reply, origin=ORIGIN).family == DEFAULT_FAMILY


def test_cited_ids() -> None:
    assert parse_cited_ids("Knowledge: none") == []
    assert parse_cited_ids("Knowledge: [a-b], c_d; e") == ["a-b", "c_d", "e"]
    assert parse_cited_ids("nothing cited") == []


def test_defines_model_new_only_at_module_level() -> None:
    assert defines_model_new(MODEL_NEW)
    nested = "def make():\n    class ModelNew:\n        pass\n    return ModelNew\n"
    assert not defines_model_new(nested)
    assert not defines_model_new("ModelNew = object\n")
