"""aka.agent: the LangGraph optimization loop, its proposers, profile feedback and dropout.

Never talks HTTP to clients (that is ``aka.service``); calls the scorer (``aka.bench``) and the
knowledge base (``aka.kb``).
"""
