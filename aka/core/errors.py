"""Every exception aka raises, in one tree (STYLE E1).

Owns the exception hierarchy and the stable ``code`` each class carries (the service returns it as
``{code, message}``). Must not import anything heavier than the standard library.

A candidate's failure is never an exception: it is an ``EvalResult`` verdict. Only failures of aka
itself, or of the input a person gave it, raise::

    AkaError (code: str)
      ConfigError                  bad or missing setting
      SpecError(ValueError)        invalid op.yaml, front matter, or shapes
      NotFoundError                job / doc / kernel id unknown
      HardwareError -> UnsupportedHardwareError
      BenchError    -> SandboxError (harness died, not the candidate),
                       BaselineError (reference itself fails)
      KBError       -> IndexNotBuiltError
      AgentError    -> LLMError (provider failed after retries)
      AuthError                    service request without a valid token (401) or scope (403)
      ServiceError                 a call to the REST service failed (client side: aka.tools);
                                   carries the server's {code, message} and the HTTP status
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "AkaError",
    "AuthError",
    "BaselineError",
    "BenchError",
    "ConfigError",
    "HardwareError",
    "IndexNotBuiltError",
    "KBError",
    "LLMError",
    "NotFoundError",
    "SandboxError",
    "ServiceError",
    "SpecError",
    "UnsupportedHardwareError",
]


class AkaError(Exception):
    """Base of every error aka raises on purpose; ``code`` is stable and machine-readable."""

    code: str = "aka.error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The human-readable message (what failed, the value, what to do)."""
        return str(self.args[0]) if self.args else ""


class ConfigError(AkaError):
    """A setting is missing, malformed or contradicts another."""

    code = "config.invalid"


class SpecError(AkaError, ValueError):
    """A problem, op.yaml, shapes file or front matter is invalid.

    Args:
        message: What is wrong and how to fix it.
        file: The offending file, when there is one.
        field: The dotted field path inside that file, when known.
    """

    code = "spec.invalid"

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = ", ".join(p for p in (file and f"{file}", field and f"field '{field}'") if p)
        super().__init__(f"{where}: {message}" if where else message)


class NotFoundError(AkaError):
    """A job, document, kernel or run id is unknown."""

    code = "not_found"


class HardwareError(AkaError):
    """The device cannot be detected or measured."""

    code = "hardware.error"


class UnsupportedHardwareError(HardwareError):
    """The device exists but cannot run what was asked."""

    code = "hardware.unsupported"


class BenchError(AkaError):
    """The scorer itself failed (never a candidate's fault)."""

    code = "bench.error"


class SandboxError(BenchError):
    """A worker process of the harness died or spoke nonsense for reasons not due to a candidate."""

    code = "bench.sandbox"


class BaselineError(BenchError):
    """The problem's reference itself fails to build or run."""

    code = "bench.baseline"


class KBError(AkaError):
    """The knowledge base failed to load, index or answer."""

    code = "kb.error"


class IndexNotBuiltError(KBError):
    """A query was made before ``aka kb build``."""

    code = "kb.index_not_built"


class AgentError(AkaError):
    """The agent loop failed for reasons other than a budget running out."""

    code = "agent.error"


class LLMError(AgentError):
    """The LLM provider failed after the configured retries."""

    code = "agent.llm"


class AuthError(AkaError):
    """A service request without a valid token (``status`` 401) or without its scope (403)."""

    code = "auth.unauthorized"

    def __init__(self, message: str, *, status: int = 401, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status


class ServiceError(AkaError):
    """A call to the REST service failed, as a client (``aka.tools``) sees it.

    ``code`` and the message are the server's ``{code, message}`` body when it answered (for
    example ``spec.invalid`` with 422, ``auth.unauthorized`` with 401, ``kb.index_not_built`` with
    503); ``status`` is the HTTP status, or None when no answer came: the service could not be
    reached (``service.unreachable``), a job did not finish in time (``service.job_timeout``), or
    a tool call named an unknown tool or bad arguments (``tools.*``).

    Args:
        message: What failed and what to do.
        status: The HTTP status of the answer; None when there was none.
        code: The server's error code (default ``service.error``).
    """

    code = "service.error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status
