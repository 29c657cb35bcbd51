"""The order desk's tool: each call is its own durable activity (timeout, heartbeats, retries)."""

from __future__ import annotations

_ORDERS = {42: "shipped on Monday", 7: "waiting for stock"}


async def lookup_order(order_id: int) -> str:
    """Where an order is.

    Args:
        order_id: the order's number, as the customer gives it.
    """
    return _ORDERS.get(order_id, f"there is no order {order_id}")
