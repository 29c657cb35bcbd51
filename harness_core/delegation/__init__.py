"""Delegation to other agents over A2A: the stand-in child workflow (``workflow``) and its
activities (``activities``: the send, the reads, the cancel, the push receiver's check).

This ``__init__`` imports nothing, so the workflow's module stays light inside Temporal's sandbox.
"""
