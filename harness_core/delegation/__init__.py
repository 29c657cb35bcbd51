"""Delegation to other agents over A2A: the stand-in child workflow (``workflow``), its
activities (``activities``: the send, the reads, the cancel, the push receiver's check), and how
each call reaches the other agent (``calls``: its URL, card, client, headers and failures).

This ``__init__`` imports nothing, so the workflow's module stays light inside Temporal's sandbox.
"""
