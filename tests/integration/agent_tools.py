"""Tools the LLM agent tests configure by path (``tests.integration.agent_tools:<name>``)."""

from __future__ import annotations

import threading

import anyio

from harness_core.agents.tools import tool

CALLS: list[tuple[str, object]] = []
CANCELLED = threading.Event()
STARTED = threading.Event()
_lock = threading.Lock()


async def lookup_order(order_id: int) -> str:
    """Where an order is.

    Args:
        order_id: the order's number.
    """
    with _lock:
        CALLS.append(("lookup_order", order_id))
    return f"order {order_id} shipped on Monday"


@tool(idempotent=False)
async def charge_card(amount: int) -> dict[str, object]:
    """Charge the customer's card (must not run twice)."""
    with _lock:
        CALLS.append(("charge_card", amount))
    raise RuntimeError("the card processor is down")


@tool(timeout=120)
async def slow_search(query: str) -> str:
    """Search slowly (until cancelled)."""
    STARTED.set()
    try:
        await anyio.sleep(120)
    except BaseException:
        CANCELLED.set()
        raise
    return f"nothing for {query}"
