"""Shared fakes for tests (STYLE X3): deterministic stand-ins that speak the real protocols."""
