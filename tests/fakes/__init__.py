"""Test support: scripted stand-ins for the services the runtime talks to (model servers)."""
