"""Integration tests of the embedded Temporal dev server, with real processes on loopback.

Each server start and stop costs about 1.5 s, so every test starts as few servers as it can.
Tests that need the temporalio client run under asyncio only (temporalio is asyncio-only); the
others run under both AnyIO backends, because the module must work under both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WorkflowExecutionStatus

from harness_core.embedded import EmbeddedServer, open_embedded_temporal
from harness_core.errors import EmbeddedTemporalError

pytestmark = pytest.mark.anyio

_REPO_ROOT = Path(__file__).resolve().parents[2]

# A host that starts the server and then hangs until it is killed; run in a child interpreter.
_HOST_SCRIPT = """
import sys
from pathlib import Path

import anyio

from harness_core.embedded import open_embedded_temporal


async def main() -> None:
    async with open_embedded_temporal(Path(sys.argv[1])) as server:
        print("READY", server.pid, server.address, flush=True)
        await anyio.sleep_forever()


anyio.run(main)
"""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


def _is_gone(pid: int) -> bool:
    """True once the process has exited; a zombie has exited too, it only awaits its reaper."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # the latter: it went while being read
        return True
    return status.rpartition(")")[2].split()[0] in ("Z", "X")


def _kill_if_server_on(pid: int, database: Path) -> bool:
    """SIGKILL the process if it still is a server on the database: never a reused pid."""
    if _is_gone(pid):
        return False
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    if str(database).encode() not in command_line:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def _state_file(database: Path) -> Path:
    return database.with_name(database.name + ".server.json")


async def _accepts_tcp(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        connection = await anyio.connect_tcp(host, int(port))
    except OSError:
        return False
    await connection.aclose()
    return True


async def _wait_until_gone(pid: int, within: float = 20.0) -> None:
    with anyio.fail_after(within):
        while True:
            if _is_gone(pid):
                return
            await anyio.sleep(0.05)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_server_serves_a_temporal_client_on_loopback_and_is_gone_after_exit(
    tmp_path: Path,
) -> None:
    database = tmp_path / "not-yet" / "temporal.db"

    async with open_embedded_temporal(database, namespaces=("default", "agents")) as server:
        assert server.address.startswith("127.0.0.1:")
        assert server.database_path == database.resolve()
        client = await Client.connect(server.address)
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        assert info.server_version
        assert (await client.count_workflows()).count == 0
        other = await Client.connect(server.address, namespace="agents")
        assert (await other.count_workflows()).count == 0
        state = json.loads(_state_file(database).read_text())
        assert state == {
            "pid": server.pid,
            "port": int(server.address.rpartition(":")[2]),
            "database": str(database.resolve()),
        }

    assert _is_gone(server.pid)
    assert not _state_file(database).exists()
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert stat.S_IMODE(database.parent.stat().st_mode) == 0o700


class _BodyFailed(Exception):
    pass


async def test_the_server_stops_when_the_body_fails_or_is_cancelled(tmp_path: Path) -> None:
    database = tmp_path / "temporal.db"

    started: list[EmbeddedServer] = []

    # The body's own exception comes out as itself, not wrapped in an exception group.
    with pytest.raises(_BodyFailed):
        async with open_embedded_temporal(database) as server:
            started.append(server)
            assert await _accepts_tcp(server.address)
            raise _BodyFailed
    assert _is_gone(started[-1].pid)
    assert not _state_file(database).exists()

    with anyio.CancelScope() as scope:
        async with open_embedded_temporal(database) as server:
            started.append(server)
            assert await _accepts_tcp(server.address)
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert _is_gone(started[-1].pid)
    assert not _state_file(database).exists()
    assert not await _accepts_tcp(started[-1].address)


def _servers_on(database: Path) -> list[int]:
    """The live processes whose command line names the database."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(database).encode() in command_line and not _is_gone(int(entry.name)):
            pids.append(int(entry.name))
    return pids


@pytest.mark.timeout(90)
async def test_a_server_closed_while_it_is_being_started_again_leaves_no_process(
    tmp_path: Path,
) -> None:
    """Given a dev server that died and is being started again, when the host closes before
    the new one is ready, then the new process is stopped too and the close returns (it
    used to outlive the host, and its output pumps held the host's exit for good)."""
    database = tmp_path / "temporal.db"
    async with open_embedded_temporal(database) as server:
        killed = server.pid
        os.kill(killed, signal.SIGKILL)
        with anyio.fail_after(30):
            while not (replacements := [p for p in _servers_on(database) if p != killed]):
                await anyio.sleep(0.01)
        assert not server.up  # closed while the new one starts, not after
    for pid in replacements:
        assert _is_gone(pid), f"the restarted server {pid} outlived its host"
    assert _servers_on(database) == []
    assert not _state_file(database).exists()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_server_left_by_a_killed_host_is_stopped_and_its_database_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "temporal.db"
    environment = {**os.environ, "PYTHONPATH": str(_REPO_ROOT)}
    host = await anyio.open_process(
        [sys.executable, "-c", _HOST_SCRIPT, str(database)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environment,
    )
    leftover_pid: int | None = None
    try:
        assert host.stdout is not None
        output = BufferedByteReceiveStream(host.stdout)
        seen: list[str] = []
        with anyio.fail_after(30):
            while not seen or not seen[-1].startswith("READY "):
                try:
                    seen.append((await output.receive_until(b"\n", 65536)).decode())
                except anyio.IncompleteRead:
                    pytest.fail("the host exited before its server was ready:\n" + "\n".join(seen))
        _, pid_text, address = seen[-1].split()
        leftover_pid = int(pid_text)

        client = await Client.connect(address)
        await client.start_workflow("Nothing", id="survivor", task_queue="nobody-polls-this")

        # SIGKILL runs no cleanup: the host's server child is left running, orphaned.
        host.kill()
        await host.wait()
        assert not _is_gone(leftover_pid)

        with caplog.at_level(logging.WARNING, logger="harness.temporal"):
            async with open_embedded_temporal(database) as server:
                assert _is_gone(leftover_pid)
                assert server.pid != leftover_pid
                client = await Client.connect(server.address)
                description = await client.get_workflow_handle("survivor").describe()
                assert description.status == WorkflowExecutionStatus.RUNNING
        assert any(
            str(leftover_pid) in record.getMessage()
            and str(database.resolve()) in record.getMessage()
            for record in caplog.records
            if record.levelno == logging.WARNING
        )
    finally:
        with anyio.CancelScope(shield=True):
            if host.returncode is None:
                host.kill()
            await host.aclose()
            if leftover_pid is not None and _kill_if_server_on(leftover_pid, database):
                await _wait_until_gone(leftover_pid)


async def test_a_stale_state_file_is_ignored_and_removed(tmp_path: Path) -> None:
    database = tmp_path / "temporal.db"
    # The highest pid Linux hands out is below 2**22, so this pid names no process.
    stale = {"pid": 2**22 + 7, "port": 1, "database": str(database)}
    _state_file(database).write_text(json.dumps(stale))

    async with open_embedded_temporal(database) as server:
        assert await _accepts_tcp(server.address)
        assert json.loads(_state_file(database).read_text())["pid"] == server.pid

    assert not _state_file(database).exists()


async def test_a_second_open_of_a_database_in_use_is_refused_and_names_it(
    tmp_path: Path,
) -> None:
    database = tmp_path / "temporal.db"

    async with open_embedded_temporal(database) as first:
        with pytest.raises(EmbeddedTemporalError, match=re.escape(str(database.resolve()))):
            async with open_embedded_temporal(database):
                pytest.fail("a second server started on a database in use")
        # The refused open touched neither the running server nor its state file.
        assert await _accepts_tcp(first.address)
        assert json.loads(_state_file(database).read_text())["pid"] == first.pid

    assert _is_gone(first.pid)


async def test_a_server_that_cannot_start_is_reported_with_the_reason(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    with pytest.raises(EmbeddedTemporalError, match="a-file"):
        async with open_embedded_temporal(a_file / "temporal.db"):
            pytest.fail("started with its database inside a file")

    # The server itself refuses a database that is not SQLite: its exit code and last words
    # are in the message, and nothing is left behind.
    not_sqlite = tmp_path / "garbage.db"
    not_sqlite.write_text("this is not a SQLite database\n")
    with pytest.raises(EmbeddedTemporalError, match=r"exited with code 1(?s:.*)not a database"):
        async with open_embedded_temporal(not_sqlite):
            pytest.fail("started on a database that is not SQLite")
    assert not _state_file(not_sqlite).exists()
    assert not_sqlite.read_text() == "this is not a SQLite database\n"


@contextlib.contextmanager
def _held_port() -> Iterator[int]:
    """A loopback port that a listening socket of the test's holds until the block ends."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Temporal client
async def test_a_port_taken_before_the_server_binds_it_is_traded_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The race: the port probed free is bound by another process before the server binds it.
    # Here the first port handed out is held open by the test, so the real server refuses it.
    from harness_core.embedded import command, server

    caplog.set_level(logging.INFO, logger="harness.temporal")
    with _held_port() as held:
        handed: list[int] = []

        def racing_free_port() -> int:
            handed.append(held if not handed else command.free_port())
            return handed[-1]

        monkeypatch.setattr(server, "free_port", racing_free_port)
        async with open_embedded_temporal(tmp_path / "temporal.db") as started:
            client = await Client.connect(started.address)
            assert (await client.count_workflows()).count == 0
            state = json.loads(_state_file(tmp_path / "temporal.db").read_text())
    assert len(handed) == 2
    assert started.address == f"127.0.0.1:{handed[1]}"
    assert state["port"] == handed[1] and state["pid"] == started.pid
    assert f"port {held} was taken" in caplog.text
    assert _is_gone(started.pid)


async def test_a_server_whose_port_is_always_taken_gives_up_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness_core.embedded import server

    with _held_port() as held:
        handed: list[int] = []

        def taken_port() -> int:
            handed.append(held)
            return held

        monkeypatch.setattr(server, "free_port", taken_port)
        with pytest.raises(EmbeddedTemporalError, match="address already in use") as refused:
            async with open_embedded_temporal(tmp_path / "temporal.db"):
                pytest.fail("started on a port in use")
    assert len(handed) == 3
    assert f"ports tried, each taken by another process before the server bound it: {held}, " in (
        str(refused.value)
    )
    assert not _state_file(tmp_path / "temporal.db").exists()


async def test_a_taken_web_ui_port_is_not_traded_for_another_grpc_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the server's own gRPC port is chosen here; a UI port asked for stays what it is.
    from harness_core.embedded import command, server

    handed: list[int] = []

    def counted_free_port() -> int:
        handed.append(command.free_port())
        return handed[-1]

    monkeypatch.setattr(server, "free_port", counted_free_port)
    with _held_port() as held, pytest.raises(EmbeddedTemporalError, match="UI port"):
        async with open_embedded_temporal(tmp_path / "temporal.db", ui_port=held):
            pytest.fail("started with its UI port in use")
    assert len(handed) == 1


async def test_the_web_ui_is_served_on_loopback_when_asked_for(tmp_path: Path, caplog) -> None:
    import httpx

    from tests.servers import free_port

    caplog.set_level(logging.INFO, logger="harness.temporal")
    port = free_port()
    async with (
        open_embedded_temporal(tmp_path / "temporal.db", ui_port=port),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        page = await http.get("/")
        # Its API reaches the server (after the UI's first dial, which may come too early).
        with anyio.fail_after(20):
            while (api := await http.get("/api/v1/namespaces")).status_code != 200:
                await anyio.sleep(0.2)
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "default" in api.text
    assert f"Temporal Web UI on http://127.0.0.1:{port}" in caplog.text
