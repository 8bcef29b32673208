from __future__ import annotations

import inspect

import pytest

import aka.core.errors as errors_module
from aka.core import AkaError, SpecError

# The codes are part of the API ({code, message} bodies): changing one must fail this test.
EXPECTED_CODES = {
    "AkaError": "aka.error",
    "ConfigError": "config.invalid",
    "SpecError": "spec.invalid",
    "NotFoundError": "not_found",
    "HardwareError": "hardware.error",
    "UnsupportedHardwareError": "hardware.unsupported",
    "BenchError": "bench.error",
    "SandboxError": "bench.sandbox",
    "BaselineError": "bench.baseline",
    "KBError": "kb.error",
    "IndexNotBuiltError": "kb.index_not_built",
    "AgentError": "agent.error",
    "LLMError": "agent.llm",
    "AuthError": "auth.unauthorized",
    "ServiceError": "service.error",
}


def _error_classes() -> dict[str, type[AkaError]]:
    return {
        name: cls
        for name, cls in inspect.getmembers(errors_module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == errors_module.__name__
    }


def test_errors_every_class_is_an_aka_error_with_a_stable_code() -> None:
    classes = _error_classes()

    assert {name: cls.code for name, cls in classes.items()} == EXPECTED_CODES
    assert all(issubclass(cls, AkaError) for cls in classes.values())


def test_errors_codes_are_distinct() -> None:
    codes = [cls.code for cls in _error_classes().values()]

    assert len(codes) == len(set(codes))


def test_errors_all_lists_every_class() -> None:
    assert sorted(errors_module.__all__) == sorted(_error_classes())


def test_aka_error_code_override_is_per_instance() -> None:
    err = AkaError("boom", code="custom.code")

    assert err.code == "custom.code"
    assert err.message == "boom"
    assert AkaError.code == "aka.error"


def test_spec_error_is_value_error_naming_file_and_field() -> None:
    err = SpecError("must be positive", file="op.yaml", field="shapes.small.input_kwargs.n")

    assert isinstance(err, ValueError)
    assert isinstance(err, AkaError)
    assert err.file == "op.yaml"
    assert err.field == "shapes.small.input_kwargs.n"
    assert "op.yaml" in str(err)
    assert "shapes.small.input_kwargs.n" in str(err)
    assert "must be positive" in str(err)
    with pytest.raises(ValueError, match="op.yaml"):
        raise err


def test_spec_error_without_location_is_just_the_message() -> None:
    assert str(SpecError("bad shapes")) == "bad shapes"
