"""The HTTP face of a2a-harness: A2A routes over Temporal, the 503 gate, the Hypercorn runner."""

from harness_asgi.app import HarnessApp, group_app
from harness_asgi.handler import HarnessRequestHandler
from harness_asgi.serve import serve_http

__all__ = ["HarnessApp", "HarnessRequestHandler", "group_app", "serve_http"]
