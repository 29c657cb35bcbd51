"""Temporal plumbing that no agent code sees: the claim check at the payload boundary."""
