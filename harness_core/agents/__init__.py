"""What runs in a turn: the turn API, the built-in agents, models and tools."""
