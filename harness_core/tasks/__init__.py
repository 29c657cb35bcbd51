"""A2A tasks: the pure state machine (``state``), its Temporal driver (``workflow``, with
``attempts`` and ``llm_turn``), and the service the HTTP face calls (``service``).

This ``__init__`` imports nothing: the workflow's modules are imported again inside Temporal's
sandbox for every run, and must not pull the service (and its I/O) in with them.
"""
