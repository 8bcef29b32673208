"""Agent test fixtures: a scripted OpenAI-compatible server and one shared litellm import."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.fakes.openai_server import ScriptedOpenAIServer


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    """A running ``ScriptedOpenAIServer`` on 127.0.0.1 with an empty script (``push`` replies)."""
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def litellm_module() -> ModuleType:
    """litellm, imported once per session (it takes seconds) with the offline defaults applied.

    ``apply_offline_defaults`` must run before the import: without ``LITELLM_LOCAL_MODEL_COST_MAP``
    litellm fetches its cost map from the network on import.
    """
    from aka.core import apply_offline_defaults

    apply_offline_defaults()
    import litellm

    litellm.suppress_debug_info = True
    return litellm
