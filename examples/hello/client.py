"""Talk to the hello agent with a2a-sdk's client: one blocking send, then a streamed one.

Start the agent first (`harness serve examples/hello/agent.toml`), then run
`python examples/hello/client.py [URL]`.
"""

from __future__ import annotations

import sys
import uuid

import anyio
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState


def message(text: str) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])


async def main(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        print(f"agent: {card.name} at {card.supported_interfaces[0].url}")

        blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        async for event in blocking.send_message(SendMessageRequest(message=message("hello"))):
            task = event.task
            state = TaskState.Name(task.status.state)
            print(f"task {task.id}: {state} -> {task.artifacts[0].parts[0].text!r}")

        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        async for event in streaming.send_message(SendMessageRequest(message=message("stream"))):
            print("  event:", event.WhichOneof("payload"))

        again = await blocking.get_task(GetTaskRequest(id=task.id))
        print(f"task {again.id} is still readable: {TaskState.Name(again.status.state)}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000")
