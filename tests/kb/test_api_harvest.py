"""The API layer harvested from the installed Triton and PyTorch (CPU only, no device touched)."""

from __future__ import annotations

import inspect

import pytest
import torch

from aka.kb.api_harvest import harvest_api_chunks
from aka.kb.chunk import Chunk
from aka.kb.schema import Layer


def _triton():  # type: ignore[no-untyped-def]
    """Import triton lazily: reference-kernel tests need it first imported in interpreter mode."""
    import triton
    import triton.language

    return triton


@pytest.fixture(scope="module")
def harvest() -> tuple[list[Chunk], str]:
    return harvest_api_chunks()


@pytest.fixture(scope="module")
def by_id(harvest: tuple[list[Chunk], str]) -> dict[str, Chunk]:
    return {chunk.chunk_id: chunk for chunk in harvest[0]}


def test_harvest_version_label_names_the_installed_packages(
    harvest: tuple[list[Chunk], str],
) -> None:
    _, label = harvest

    assert label == f"triton-{_triton().__version__}+torch-{torch.__version__}"


def test_harvest_ids_are_unique_and_sorted(harvest: tuple[list[Chunk], str]) -> None:
    ids = [chunk.chunk_id for chunk in harvest[0]]

    assert len(ids) == len(set(ids))
    assert ids == sorted(ids)


def test_harvest_covers_every_public_callable_of_triton_language(by_id: dict[str, Chunk]) -> None:
    tl = _triton().language
    public = {n for n in dir(tl) if not n.startswith("_") and callable(getattr(tl, n))}

    harvested = {
        cid.removeprefix("api:triton.language.")
        for cid in by_id
        if cid.startswith("api:triton.language.")
    }

    assert harvested == public
    assert {"load", "store", "dot", "program_id", "arange", "static_range"} <= harvested


def test_harvest_load_signature_mentions_mask_and_other(by_id: dict[str, Chunk]) -> None:
    chunk = by_id["api:triton.language.load"]

    first_line = chunk.text.splitlines()[0]
    assert first_line.startswith("triton.language.load(pointer, mask=None, other=None")
    assert "_semantic" not in first_line  # private parameters are dropped
    assert "tl.load" in chunk.text
    assert chunk.title.startswith("triton.language.load(pointer, mask=None")


def test_harvest_dot_signature_mentions_input_precision(by_id: dict[str, Chunk]) -> None:
    assert (
        "input_precision" in inspect.signature(_triton().language.dot).parameters
    )  # the premise, on 3.7.1

    chunk = by_id["api:triton.language.dot"]

    assert "input_precision=None" in chunk.text.splitlines()[0]
    assert "matrix product" in chunk.text


def test_harvest_jit_functions_show_their_real_signature(by_id: dict[str, Chunk]) -> None:
    # tl.sum is a JITFunction, whose own signature is (*args, **kwargs).
    first_line = by_id["api:triton.language.sum"].text.splitlines()[0]

    assert first_line.startswith("triton.language.sum(input, axis=None")


def test_harvest_runtime_and_torch_symbols_present(by_id: dict[str, Chunk]) -> None:
    for name in (
        "triton.jit",
        "triton.autotune",
        "triton.Config",
        "triton.cdiv",
        "triton.testing.do_bench",
        "triton.testing.do_bench_cudagraph",
        "torch.cuda.Event",
        "torch.cuda.Event.elapsed_time",
        "torch.cuda.synchronize",
        "torch.cuda.CUDAGraph",
        "torch.library.triton_op",
    ):
        assert f"api:{name}" in by_id, name

    assert "quantiles=None" in by_id["api:triton.testing.do_bench"].text.splitlines()[0]
    assert "enable_timing=False" in by_id["api:torch.cuda.Event"].text.splitlines()[0]
    # `self` is dropped from methods.
    assert by_id["api:torch.cuda.Event.record"].title.startswith("torch.cuda.Event.record(stream")


def test_harvest_chunk_fields(by_id: dict[str, Chunk]) -> None:
    load, event = by_id["api:triton.language.load"], by_id["api:torch.cuda.Event"]

    assert (load.doc_id, load.layer, load.kind) == ("api:triton.language.load", Layer.API, "api")
    assert load.source == f"triton=={_triton().__version__}"
    assert load.metadata == {"package": "triton", "version": _triton().__version__, "dsl": "triton"}
    assert event.source == f"torch=={torch.__version__}"
    assert event.metadata == {"package": "torch", "version": torch.__version__, "dsl": "any"}
    assert all(len(chunk.title) <= 120 for chunk in by_id.values())
    assert all(" at 0x" not in chunk.text for chunk in by_id.values())


def test_harvest_docstrings_are_trimmed(by_id: dict[str, Chunk]) -> None:
    # triton.autotune's docstring is over 3000 characters.
    text = by_id["api:triton.autotune"].text

    assert text.endswith("[...]")
    assert len(text) < 1500 + 400


def test_harvest_is_deterministic(harvest: tuple[list[Chunk], str]) -> None:
    assert harvest_api_chunks() == harvest
