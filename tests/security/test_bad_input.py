"""Bad input gets its A2A error and nothing else: never a 5xx, never an exception's text, one INFO line.

A real ``harness serve`` process (JSON logs, on the session's dev server) takes hand-picked hostile
requests from the fuzzing review and then property-based ones (hypothesis): JSON-RPC and HTTP+JSON
bodies, ids, content types and query parameters. Every answer must be a 2xx or 4xx whose body is JSON
and carries none of Python's own words; the server's log must hold no traceback and no ERROR.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import free_port
from tests.servers import STARTUP_SECONDS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: Words of Python's, its parsers' and its libraries' that no answer may carry.
LEAKS = (
    "Traceback",
    "codec",
    "Expecting",
    "line 1 column",
    "recursion",
    "invalid literal",
    "<method",
    "object at 0x",
    "SystemError",
    "Exception",
    "Error:",
    "google._upb",
    'File "',
    "unknown exception",
)
METHODS = (
    "SendMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "NoSuchMethod",
)
REST_POSTS = (
    "/message:send",
    "/tasks/x:cancel",
    "/tasks/x/pushNotificationConfigs",
    "/t/message:send",
)
HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}


class Agent:
    """A ``harness serve`` child with JSON logs in a file."""

    def __init__(self, directory: Path, address: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = directory / "fuzzed.toml"
        config.write_text(
            textwrap.dedent(
                f"""
                [agent]
                id = "fuzzed-{uuid.uuid4().hex[:6]}"

                [temporal]
                mode = "remote"
                address = "{address}"

                [server]
                bind = "127.0.0.1:{self.port}"
                graceful_timeout = "2s"
                max_request_bytes = 65536

                [model]
                kind = "echo"
                """
            )
        )
        self.log_path = directory / "fuzzed.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "harness_core.cli",
                    "serve",
                    str(config),
                    "--log-format",
                    "json",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        deadline = time.monotonic() + STARTUP_SECONDS
        while "serving 1 agent" not in self.log:
            assert self.process.poll() is None, self.log
            assert time.monotonic() < deadline, self.log
            time.sleep(0.05)  # another process: its log is the only signal

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, temporal_address: str) -> Iterator[Agent]:
    served = Agent(tmp_path_factory.mktemp("fuzz"), temporal_address)
    try:
        yield served
        assert served.stop() == 0
    finally:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait()
    records = [json.loads(line) for line in served.log.splitlines() if line.startswith("{")]
    assert [r for r in records if r.get("level") in ("ERROR", "CRITICAL")] == []
    # A client's mistake (a task not found, a bad parameter) is the client's: INFO at most.
    assert [
        r for r in records if r.get("level") == "WARNING" and r["logger"].startswith("a2a")
    ] == []
    assert any(
        r["logger"] == "harness.http" and r["message"].startswith("refused") for r in records
    )
    assert "Traceback" not in served.log
    assert "\x1b[" not in served.log  # every line went through the JSON format


@pytest.fixture(scope="module")
def http(agent: Agent) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=agent.url, timeout=30) as client:
        yield client


def check(response: httpx.Response) -> Any:
    """The answer is no 5xx, is JSON, and leaks nothing; return its body."""
    text = response.text
    assert response.status_code < 500, (response.status_code, text)
    for word in LEAKS:
        assert word not in text, (word, text)
    return response.json()


def rpc_error(response: httpx.Response) -> tuple[int, str]:
    body = check(response)
    return body["error"]["code"], body["error"]["message"]


def test_malformed_json_rpc_gets_parse_and_request_errors_in_our_words(http: httpx.Client) -> None:
    post = lambda content, **kw: http.post("/", content=content, headers={**HEADERS, **kw})  # noqa: E731
    assert rpc_error(post(b"{not json")) == (-32700, "Parse error: the body is not valid JSON")
    assert rpc_error(post(b'{"id": "\xff"}'))[0] == -32700
    assert rpc_error(post(b"[" * 50_000))[0] == -32700  # the recursion review case
    lone = post(b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "GetTask", "params": {}}')
    assert lone.headers["content-type"].startswith("application/json")
    assert rpc_error(lone)[0] == -32700
    assert rpc_error(post(b"[]")) == (-32600, "Invalid Request: batch requests are not supported")
    assert rpc_error(post(b'{"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}'))[0] == -32600
    assert rpc_error(post(b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}'))[0] == -32600
    wrong = post(b'{"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {"pageSize": "x"}}')
    assert rpc_error(wrong) == (
        -32602,
        "Invalid params for ListTasks: the field pageSize does not have the type its schema gives",
    )
    assert wrong.json()["id"] == 7
    weird = post(b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": NaN}}')
    assert rpc_error(weird)[0] == -32700
    typed = http.post(
        "/", content=b"{}", headers={"A2A-Version": "1.0", "Content-Type": "text/plain"}
    )
    assert typed.status_code == 415
    assert rpc_error(typed)[0] == -32600


def test_malformed_rest_gets_400_or_415_in_our_words(http: httpx.Client) -> None:
    not_utf8 = http.post("/message:send", content=b"\xff\xfe", headers=HEADERS)
    assert not_utf8.status_code == 400
    assert check(not_utf8)["error"]["status"] == "INVALID_ARGUMENT"
    typed = http.post(
        "/message:send", content=b"{}", headers={**HEADERS, "Content-Type": "text/xml"}
    )
    assert typed.status_code == 415
    query = http.get("/tasks", params={"pageSize": "ten"}, headers=HEADERS)
    assert query.status_code == 400
    assert check(query)["error"]["message"] == "the query parameter pageSize must be an integer"
    shape = http.post("/message:send", json={"message": {"parts": "nope"}}, headers=HEADERS)
    assert shape.status_code == 400
    check(shape)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
message_like = st.fixed_dictionaries(
    {},
    optional={
        "messageId": json_values | st.text(max_size=10),
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "nope", 3]),
        "parts": st.lists(
            st.fixed_dictionaries(
                {}, optional={"text": json_values, "raw": json_values, "url": json_values}
            ),
            max_size=3,
        )
        | json_values,
        "taskId": json_values,
        "contextId": json_values,
    },
)
params_like = st.fixed_dictionaries(
    {},
    optional={
        "message": message_like | json_values,
        "id": json_values,
        "pageSize": json_values,
        "historyLength": json_values,
        "statusTimestampAfter": json_values,
        "configuration": json_values,
        "tenant": json_values,
    },
)
ids = (
    st.none()
    | st.integers()
    | st.text(max_size=12)
    | st.floats()
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(METHODS) | st.text(max_size=12),
    params=params_like | json_values,
    request_id=ids,
    version=st.sampled_from(["2.0", "1.0", None, 2]),
    content_type=st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", ""]
    ),
)
def test_any_json_rpc_request_gets_a_clean_answer(
    http: httpx.Client, method: Any, params: Any, request_id: Any, version: Any, content_type: str
) -> None:
    envelope: dict[str, Any] = {"jsonrpc": version, "id": request_id, "method": method}
    if params is not None:
        envelope["params"] = params
    headers = {"A2A-Version": "1.0", "Content-Type": content_type}
    if (
        method == "SendMessage"
        and isinstance(params, dict)
        and isinstance(params.get("message"), dict)
    ):
        params.setdefault("configuration", {"returnImmediately": True})
    response = http.post("/", content=json.dumps(envelope).encode(), headers=headers)
    check(response)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    path=st.sampled_from(REST_POSTS),
    body=st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()),
    content_type=st.sampled_from(["application/json", "text/plain", "application/a2a+json"]),
)
def test_any_rest_body_gets_a_clean_answer(
    http: httpx.Client, path: str, body: bytes, content_type: str
) -> None:
    response = http.post(
        path, content=body, headers={"A2A-Version": "1.0", "Content-Type": content_type}
    )
    check(response)


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    query=st.dictionaries(
        st.sampled_from(
            [
                "pageSize",
                "historyLength",
                "includeArtifacts",
                "status",
                "pageToken",
                "contextId",
                "statusTimestampAfter",
            ]
        ),
        st.text(max_size=12),
        max_size=4,
    ),
    path=st.sampled_from(["/tasks", "/tasks/nope", "/tasks/nope:subscribe"]),
)
def test_any_rest_query_gets_a_clean_answer(
    http: httpx.Client, query: dict[str, str], path: str
) -> None:
    response = http.get(path, params=query, headers={"A2A-Version": "1.0"})
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.status_code == 200
        return
    check(response)
