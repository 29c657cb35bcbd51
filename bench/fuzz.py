"""Fuzz: hostile HTTP on every route of a real ``harness serve``, counting what must never happen.

What is measured
----------------
One agent (echo model, 0.3 s a turn, so that some tasks still run when they are read) served by
``harness serve --log-format json`` on the embedded default, in a child process bound to loopback.
``--cases`` requests (10,000) from a seeded generator, ``--concurrency`` (8) at a time, until the
cases are spent or ``--max-seconds`` (600) have passed. A few tasks are made first (and more by the
valid sends among the cases), and hostile requests name them where a route takes a task id.

* Every route: JSON-RPC at ``/``; every HTTP+JSON route of A2A 1.0 (11.3), also under a tenant and
  with methods a route does not take; the agent card; ``/_monitor``; the push receiver
  ``/a2a/push/<id>``; ``/ui`` (with path traversal); unknown paths.
* JSON-RPC envelopes: every method with typed, random, broken or hostile params (wrong types, huge
  and negative numbers, nesting around the guard's limit and far past it, lone surrogates, NaN,
  non-UTF-8, truncated JSON), ``rpc.*`` and other unknown methods, batches, ids of every type, a
  missing or wrong ``jsonrpc``, params that are no object.
* Hostile headers: ``Last-Event-ID`` (huge, negative, not a number, not ASCII) on
  ``SubscribeToTask`` over both bindings, ``A2A-Version`` and ``X-Participant-Id`` garbage, odd
  ``Content-Type``, huge values, many and repeated headers.
* Over raw sockets (``--raw-timeout`` per case): a ``Content-Length`` longer than the body, then a
  half-close or a close; one shorter than the body (the rest reads as a next request); bodies cut
  short; broken chunked encoding; both framings at once; conflicting or malformed lengths; header
  bytes no client library sends (NUL, CR, folded lines, non-UTF-8 names); odd request lines.

It reports:

* ``5xx``: answers with a status of 500 or more (target 0);
* ``leaks``: answers carrying Python's or a parser's words (``Traceback``, ``codec``, ...), an
  exception class name (``...Error``), a source path, or the planted secret (target 0). The secret
  is the value of an environment variable that the agent's config names as a header for another
  agent (so the process's secret registry holds it), and the content of a file beside ``ui_dir``;
* ``hangs``: requests with no answer within ``--timeout`` (HTTP) or ``--raw-timeout`` (a raw
  request that was whole, or whose sender half-closed) seconds (target 0);
* ``transport``: HTTP requests that failed below HTTP (a reset, a connection closed under a
  reused one); ``held``: raw requests whose body never came, still unanswered after
  ``--raw-timeout`` (the server waits for a slow body; measured, no target);
* the server's RSS before, in the middle and at the end (target: flat), and its log: records at
  ERROR or above, records with a traceback, lines that are not JSON, the secret unmasked (target 0).
  Each distinct 5xx, leak and ERROR record is printed with an example (for a record: its last
  frames, and the requests in flight when it was written, the oddest answers first). A server
  that dies ends the run early, and says so.

The exit code is 0 whatever the counts (a measurement); 1 when the server could not be started.
Run from the repository root: ``PYTHONPATH=. python bench/fuzz.py`` (``--quick``: 1,000 cases;
``--backend trio`` serves on Trio; ``--log FILE`` keeps the server's log).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx

#: Python's or a parser's own words in an answer.
LEAKS = (
    "Traceback", "codec", "Expecting", "line 1 column", "recursion", "invalid literal", "<method",
    "object at 0x", "SystemError", "Exception", "google._upb", 'File "', "unknown exception",
    "Missed fields", "site-packages", "harness_core", "harness_asgi"
)  # fmt: skip
#: An exception class's name, or a path to Python source, in an answer. The fuzzer never sends
#: such words itself, so an answer that echoes what it was sent does not count.
LEAK_PATTERN = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Disconnect)\b|\w\.py\b")
#: The environment variable whose value is planted (the secret the answers must not carry).
SECRET_VARIABLE = "HARNESS_FUZZ_PEER_TOKEN"
OWNER = b"fuzz-owner"
#: Where a case names a task: replaced, when it is sent, by the id of a task the fuzzer made.
TASK = "{task}"
CARD = "/.well-known/agent-card.json"

METHODS = (
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
    "SubscribeToTask", "GetExtendedAgentCard", "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig"
)  # fmt: skip
ODD_METHODS = (
    "rpc.discover", "rpc.", "rpc.foo", "", "Nope", "message/send", "tasks/get", "sendmessage",
    "SendMessage ", "x" * 5000, 5, None, ["GetTask"], {"a": 1}
)  # fmt: skip
#: Every HTTP+JSON route of A2A 1.0 (11.3) the SDK serves, as (method, path).
REST = (
    ("POST", "/message:send"), ("POST", "/message:stream"), ("POST", "/tasks/{id}:cancel"),
    ("GET", "/tasks/{id}:subscribe"), ("POST", "/tasks/{id}:subscribe"), ("GET", "/tasks/{id}"),
    ("GET", "/tasks/{id}/pushNotificationConfigs/{push}"),
    ("DELETE", "/tasks/{id}/pushNotificationConfigs/{push}"),
    ("POST", "/tasks/{id}/pushNotificationConfigs"),
    ("GET", "/tasks/{id}/pushNotificationConfigs"), ("GET", "/tasks"),
    ("GET", "/extendedAgentCard")
)  # fmt: skip
FIELDS = (
    "message", "id", "pageSize", "pageToken", "historyLength", "statusTimestampAfter", "status",
    "contextId", "includeArtifacts", "configuration", "tenant", "metadata", "page_size",
    "history_length", "include_artifacts", "taskId"
)  # fmt: skip
#: Task ids in paths.
PATH_IDS = (
    TASK, TASK, TASK, "nope", "x" * 300, "%00", "a%20b", "%ff", "..%2f..", "%2e%2e",
    "a:subscribe", "%E2%80%AE", TASK + "%00", "%ED%A0%80"
)  # fmt: skip
UI_PATHS = (
    "/ui", "/ui/", "/ui/index.html", "/ui/%2e%2e/secret.txt", "/ui/..%2fsecret.txt",
    "/ui/%2e%2e%2fsecret.txt", "/ui/....//secret.txt", "/ui//etc/passwd", "/ui/%00",
    "/ui/" + "a" * 5000, "/ui/%c0%ae%c0%ae/secret.txt", "/ui/nope"
)  # fmt: skip
#: Paths nobody serves.
STRAY_PATHS = (
    "/nope", "/tasks/", "//", "/a2a/push/", "/a2a/push", "/a2a", "/%00", "/" * 50,
    "/.well-known/", "/agents/fuzzed/", "/message:send/x", "/tasks/a/b/c/d"
)  # fmt: skip
#: Webhook URLs: the SSRF guard refuses each without a DNS lookup (it looks a name up), so
#: nothing leaves loopback.
WEBHOOKS = (
    "http://127.0.0.1:9/hook", "http://[::1]/a2a/push/x", "http://169.254.169.254/latest",
    "http://10.0.0.1/", "file:///etc/passwd", "gopher://127.0.0.1/", "http://localhost/", "",
    "http://", "http://[::1", "http://127.0.0.1:99999/"
)  # fmt: skip
LAST_EVENT_IDS = (
    "-1", "abc", "1e9", "0", "1", "3", "3.0", "1.5", "", "nan", "inf", "-0", "0x10", "1_000",
    "9" * 30, "9" * 5000, "18446744073709551616", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "1 2"
)  # fmt: skip
VERSIONS = ("1.0", "1.0", "1.0", "0.3", "9", "1", "1.0.0", "v1", "1.0;q=1", "-1", "1.0, 0.3", "")
PARTICIPANTS = ("", "alice,bob", "../../etc", '{"a": 1}', "null", "x" * 8000, "fuzz-owner, x")
CONTENT_TYPES = (
    "text/plain", "application/xml", "", "application/json; charset=latin-1",
    "application/json; charset=utf-16", "application/a2a+json", "application/json;;;",
    "APPLICATION/JSON", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
    "application/" + "j" * 3000
)  # fmt: skip
#: How a raw-socket case frames its request (``Case.framing``; None: httpx sends it).
FRAMINGS = (
    "exact", "longer", "shorter", "cut", "chunked-bad", "chunked-cut", "both", "lengths",
    "header-bytes", "huge-header", "request-line"
)  # fmt: skip
BAD_LENGTHS = (b"-1", b"abc", b"+5", b"1_0", b"0x10", b"99999999999999999999999", b"5, 5", b"")
#: Header lines no client library sends.
ODD_HEADER_LINES = (
    b"X-Fuzz: a\x00b", b"X-Fuzz: a\r\n folded", b"no colon here",
    b"Content-Type : application/json", b"X-Fuzz: a\rb", b"X-\xff\xfe: v",
    b"A2A-Version: \t1.0\t", b"X-Participant-Id: \x01\x7f", b"Last-Event-ID: \t 7 ",
    b": empty name", b"X Fuzz: space in name"
)  # fmt: skip


@attrs.frozen
class Case:
    """One request: where it goes, what it carries and, for a raw-socket case, how it is framed
    (``framing``, ``variant``) and whether the client half-closes, closes at once or reads."""

    family: str  # jsonrpc, rest, card, monitor, push, ui, other, valid
    route: str  # the route's template (findings are grouped by it)
    method: str
    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    shape: str  # what is hostile in it, in a few words
    framing: str | None = None
    variant: int = 0
    ending: str = "read"  # read | eof (half-close) | close (at once) | hold (send no more)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nested(depth: int) -> str:
    """JSON nested ``depth`` levels deep (as text: ``json.dumps`` would recurse)."""
    return "[" * depth + "]" * depth if depth % 2 else '{"a":' * depth + "1" + "}" * depth


class Cases:
    """A seeded generator of hostile requests (``Case``); the task ids they name are filled in
    when they are sent."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    # -- values -----------------------------------------------------------------------------------

    def value(self, depth: int = 0) -> Any:
        r = self.r
        kinds = ["int", "big", "neg", "float", "str", "bool", "null", "list", "dict"]
        if depth > 3:
            kinds = kinds[:7]
        kind = r.choice(kinds)
        if kind == "int":
            return r.randint(-5, 500)
        if kind == "big":
            return r.choice([2**63, 10**40, -(2**70), 2**31])
        if kind == "neg":
            return -r.randint(1, 10**6)
        if kind == "float":
            return r.choice([0.5, 1e308, -1e-9, 3.0])
        if kind == "str":
            return r.choice(
                ["", "x" * r.randint(1, 300), "TASK_STATE_COMPLETED", "\u00e9\u6f22", "../", TASK]
            )
        if kind == "bool":
            return r.random() < 0.5
        if kind == "null":
            return None
        if kind == "list":
            return [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        return {r.choice(FIELDS): self.value(depth + 1) for _ in range(r.randint(0, 3))}

    def task_id(self) -> Any:
        r = self.r
        if r.random() < 0.6:
            return TASK
        return r.choice(["nope", "", "x" * 300, "../", "\u00e9", 5, None, TASK + "\u0000"])

    def message(self) -> Any:
        r = self.r
        message: dict[str, Any] = {
            "messageId": r.choice([f"fz-{r.random()}", self.value()]),
            "role": r.choice(["ROLE_USER", "ROLE_AGENT", 7, None]),
            "parts": r.choice(
                [
                    [{"text": "hello"}],
                    [{"raw": "!!notbase64", "mediaType": "text/plain"}],
                    [{"url": self.value()}],
                    [{"data": self.value()}],
                    self.value(),
                ]
            ),
        }
        if r.random() < 0.3:
            message["taskId"] = self.task_id()
        if r.random() < 0.3:
            message["contextId"] = self.value()
        return message

    def push_config(self) -> dict[str, Any]:
        r = self.r
        config: dict[str, Any] = {"taskId": self.task_id(), "url": r.choice(WEBHOOKS)}
        if r.random() < 0.5:
            config["token"] = r.choice(["t", "x" * 5000, self.value()])
        if r.random() < 0.3:
            config["id"] = self.value()
        if r.random() < 0.2:
            config["authentication"] = {"scheme": self.value(), "credentials": self.value()}
        return config

    def params(self, method: str = "") -> Any:
        """Params for ``method``: shaped like its request most of the time, then spoilt."""
        r = self.r
        if r.random() < 0.1:
            return r.choice([[], [1], "x", 5, None, True, TASK])
        params: dict[str, Any]
        if method in ("SendMessage", "SendStreamingMessage") or (not method and r.random() < 0.5):
            params = {"message": self.message(), "configuration": {"returnImmediately": True}}
            if r.random() < 0.2:
                params["configuration"]["historyLength"] = self.value()
            if r.random() < 0.1:
                params["configuration"]["pushNotificationConfig"] = self.push_config()
        elif method in ("GetTask", "CancelTask", "SubscribeToTask"):
            params = {"id": self.task_id()}
            if r.random() < 0.3:
                params["historyLength"] = self.value()
        elif method == "CreateTaskPushNotificationConfig":
            params = self.push_config()
        elif method.endswith("PushNotificationConfig") or method.endswith("Configs"):
            params = {"taskId": self.task_id(), "id": self.value()}
        else:
            params = {}
        for field in r.sample(FIELDS, r.randint(0, 3)):
            params[field] = self.value()
        if r.random() < 0.25 and params:
            params[r.choice(list(params))] = self.value()  # a field of the wrong type
        return params

    def with_nesting(self, text: str) -> tuple[str, str]:
        """``text`` with a deeply nested value in place of its ``"@NEST@"``, sometimes."""
        if '"@NEST@"' not in text:
            return text, ""
        depth = self.r.choice([30, 63, 64, 65, 66, 200, 5000, 40_000])
        return text.replace('"@NEST@"', nested(depth), 1), f"nested {depth}"

    def raw(self, text: str) -> tuple[bytes, str]:
        """``text`` made worse, sometimes."""
        r = self.r
        choice = r.random()
        if choice < 0.05:
            return text.encode()[: r.randint(0, len(text))], "truncated JSON"
        if choice < 0.08:
            return b"\xff\xfe" + text.encode(), "not UTF-8"
        if choice < 0.10:
            return b"[" * 40_000, "40,000 ["
        if choice < 0.12:
            return text.replace('"id": 1', '"id": "\\ud800"').encode(), "lone surrogate"
        if choice < 0.14:
            return b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": NaN}}', "NaN"
        return text.encode(), ""

    # -- headers ------------------------------------------------------------------------------------

    def headers(
        self, method: str, *, streaming: bool = False, push: bool = False
    ) -> tuple[list[tuple[bytes, bytes]], list[str]]:
        """Request headers, some hostile, and words for what is hostile in them. Every value is
        one a client library sends (the raw framings add the others)."""
        r = self.r
        headers: list[tuple[bytes, bytes]] = []
        shape: list[str] = []

        def add(name: str, value: str | bytes, note: str = "") -> None:
            headers.append((name.encode(), value if isinstance(value, bytes) else value.encode()))
            if note:
                shape.append(note)

        if r.random() < 0.92:
            version = r.choice(VERSIONS)
            add("A2A-Version", version, "" if version == "1.0" else f"A2A-Version {version!r}")
        elif r.random() < 0.5:
            add("A2A-Version", r.choice([b"\xd9\xa1.0", b"1.0" * 3000]), "A2A-Version garbage")
        if method == "POST":
            if r.random() < 0.88:
                add("Content-Type", "application/json")
            else:
                content_type = r.choice(CONTENT_TYPES)
                add("Content-Type", content_type, f"Content-Type {content_type[:40]!r}")
        elif r.random() < 0.05:
            add("Content-Type", r.choice(CONTENT_TYPES), "Content-Type on a GET")
        who = r.random()
        if who < 0.55:
            add("X-Participant-Id", OWNER)
        elif who < 0.75:
            participant = r.choice(PARTICIPANTS)
            add("X-Participant-Id", participant, f"X-Participant-Id {participant[:20]!r}")
        elif who < 0.8:
            add("X-Participant-Id", b"\xff\xfe\xc3\x28", "X-Participant-Id not UTF-8")
        if r.random() < (0.7 if streaming else 0.04):
            last = r.choice(LAST_EVENT_IDS)
            add("Last-Event-ID", last, f"Last-Event-ID {last[:24]!r}")
        if r.random() < 0.02:
            add("Last-Event-ID", b"\xd9\xa1\xd9\xa2", "Last-Event-ID in Arabic digits")
        if push and r.random() < 0.7:
            add("X-A2A-Notification-Token", r.choice(["", "t", "x" * 5000, "\u00e9".encode()]))
        extra = r.random()
        if extra < 0.03:
            size = r.choice([4000, 12_000, 15_000, 40_000])
            add("X-Fuzz-Pad", "p" * size, f"a {size}-byte header")
        elif extra < 0.05:
            count = r.choice([100, 300])
            for number in range(count):
                add(f"X-Fuzz-{number}", "v")
            shape.append(f"{count} headers")
        elif extra < 0.07:
            add("A2A-Version", r.choice(VERSIONS), "A2A-Version twice")
            add("X-Participant-Id", "mallory", "X-Participant-Id twice")
        elif extra < 0.09:
            add("Accept", r.choice(["text/event-stream", "*/*;q=x", "a" * 2000]), "odd Accept")
            add("A2A-Extensions", r.choice(["", ",,,", "x" * 2000, "https://x/ext"]))
        elif extra < 0.11:
            add("If-None-Match", r.choice(['"x"', "*", "W/" + "x" * 500, '""']), "If-None-Match")
            add("Origin", "http://evil.example")
        elif extra < 0.12:
            add("Authorization", r.choice(["Bearer", "Basic !!!", "x" * 3000]), "Authorization")
        return headers, shape

    # -- requests -----------------------------------------------------------------------------------

    def jsonrpc(self) -> Case:
        r = self.r
        method: Any = r.choice([*METHODS, *METHODS, *METHODS, *ODD_METHODS])
        envelope: dict[str, Any] = {}
        shape: list[str] = []
        if r.random() < 0.93:
            envelope["jsonrpc"] = r.choice(["2.0"] * 8 + ["1.0", 2, 2.0, None, "2.0 ", ""])
        else:
            shape.append("no jsonrpc")
        if r.random() < 0.93:
            envelope["id"] = r.choice(
                [1, 1, 1, "x", None, 1.5, [1], {"a": 1}, True, 2**64, -1, "", "x" * 1000, TASK]
            )
        else:
            shape.append("no id")
        if r.random() < 0.97:
            envelope["method"] = method
        if r.random() < 0.9:
            envelope["params"] = self.params(method if isinstance(method, str) else "")
        if r.random() < 0.04 and isinstance(envelope.get("params"), dict):
            envelope["params"]["metadata"] = "@NEST@"
        if r.random() < 0.03:
            member = r.choice(["result", "error", "foo", "ID", "Params"])
            envelope[member] = self.value()
            shape.append(f"member {member!r}")
        text, nest = self.with_nesting(json.dumps(envelope))
        if r.random() < 0.05:
            fifty = "[" + ",".join([text] * (50 if len(text) < 5000 else 2)) + "]"
            text = r.choice(["[]", f"[{text}]", f"[{text},{text}]", "[[]]", "[1,2]", fifty])
            shape.append("batch")
        body, spoilt = self.raw(text)
        streaming = method in ("SubscribeToTask", "SendStreamingMessage")
        headers, notes = self.headers("POST", streaming=streaming)
        shape += [f"method {str(method)[:40]!r}", nest, spoilt, *notes]
        return Case("jsonrpc", "/", "POST", "/", tuple(headers), body, describe(shape))

    def rest(self) -> Case:
        r = self.r
        if r.random() < 0.06:
            method = r.choice(["PUT", "PATCH", "DELETE", "POST", "GET", "OPTIONS"])
            _, route = r.choice(REST)
        else:
            method, route = r.choice(REST)
        path = route.replace("{id}", r.choice(PATH_IDS)).replace(
            "{push}", r.choice(["p", "x" * 300, "%00", "%ff", ""])
        )
        shape: list[str] = []
        if r.random() < 0.1:
            tenant = r.choice(["tenant", TASK, "%00", "x" * 200, ".well-known", "_monitor"])
            path = f"/{tenant}{path}"
            shape.append(f"tenant {tenant[:20]!r}")
        query = "&".join(
            f"{k}={v}"
            for k, v in (
                (r.choice(FIELDS), r.choice(["1", "-4", "abc", "true", "1e3", "", "9" * 30]))
                for _ in range(r.choice([0, 0, 1, 2, 3]))
            )
        )
        if query:
            path = f"{path}?{query}"
            shape.append(f"query {query[:60]}")
        body = b""
        if method == "POST":
            params: Any = (
                self.push_config()
                if route.endswith("Configs")
                else self.params("SendMessage" if route.startswith("/message") else "GetTask")
            )
            text, nest = self.with_nesting(json.dumps(params))
            body, spoilt = self.raw(text)
            shape += [nest, spoilt]
            if r.random() < 0.05:
                body, shape = b"", [*shape, "no body"]
        headers, notes = self.headers(method, streaming=route.endswith(":subscribe"))
        return Case("rest", route, method, path, tuple(headers), body, describe(shape + notes))

    def push(self) -> Case:
        r = self.r
        standin = r.choice([str(uuid.UUID(int=r.getrandbits(128))), TASK, "x" * 300, "%00", ".."])
        status = {"state": r.choice(["TASK_STATE_COMPLETED", "TASK_STATE_WORKING", 7, "x"])}
        kind = r.random()
        if kind < 0.3:
            text = json.dumps({"statusUpdate": {"taskId": TASK, "status": status}})
        elif kind < 0.45:
            text = json.dumps({"task": {"id": TASK, "status": self.value()}})
        elif kind < 0.6:
            text = json.dumps({"statusUpdate": "@NEST@"})
        else:
            text = json.dumps(self.value())
        text, nest = self.with_nesting(text)
        body, spoilt = self.raw(text)
        method = "POST" if r.random() < 0.95 else r.choice(["GET", "PUT", "DELETE"])
        headers, notes = self.headers(method, push=True)
        shape = describe([f"standin {standin[:12]!r}", nest, spoilt, *notes])
        path = f"/a2a/push/{standin}"
        return Case("push", "/a2a/push/{standin}", method, path, tuple(headers), body, shape)

    def plain(self, family: str) -> Case:
        """The card, the monitor, ``/ui`` and paths nobody serves: GETs with odd queries and
        methods."""
        r = self.r
        if family == "card":
            route = CARD
            path = r.choice([CARD] * 6 + [CARD + "/", CARD + "%00", "/.well-known/agent.json"])
        elif family == "monitor":
            route = path = "/_monitor"
            path = r.choice([path] * 6 + [path + "/", path + "/x", path + "?x=" + "9" * 500])
        elif family == "ui":
            route = "/ui"
            path = r.choice(UI_PATHS)
        else:
            route = "(none)"
            path = r.choice(STRAY_PATHS)
        method = r.choice(["GET"] * 8 + ["HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
        body = b""
        shape: list[str] = []
        if method in ("POST", "PUT", "PATCH"):
            body, spoilt = self.raw(json.dumps(self.params()))
            shape.append(spoilt)
        headers, notes = self.headers(method)
        return Case(family, route, method, path, tuple(headers), body, describe(shape + notes))

    def valid(self) -> Case:
        """A send that makes a task (returned at once, so it is still running for a while)."""
        r = self.r
        params = {
            "message": {
                "messageId": f"fz-{r.getrandbits(64)}",
                "role": "ROLE_USER",
                "parts": [{"text": "hello"}],
            },
            "configuration": {"returnImmediately": True},
        }
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        headers = ((b"A2A-Version", b"1.0"), (b"Content-Type", b"application/json"))
        headers += ((b"X-Participant-Id", OWNER),) if r.random() < 0.8 else ()
        return Case("valid", "/", "POST", "/", headers, json.dumps(envelope).encode(), "valid")

    def next(self) -> Case:
        r = self.r
        pick = r.random()
        if pick < 0.03:
            return self.valid()
        families = ["jsonrpc"] * 34 + ["rest"] * 30 + ["push"] * 8 + ["card", "monitor"] * 4
        families += ["ui"] * 3 + ["other"] * 3
        family = r.choice(families)
        if family == "jsonrpc":
            case = self.jsonrpc()
        elif family == "rest":
            case = self.rest()
        elif family == "push":
            case = self.push()
        else:
            case = self.plain(family)
        if pick < 0.18:
            return self.framed(case)
        return case

    def framed(self, case: Case) -> Case:
        """``case`` sent over a raw socket, framed as a client library would not frame it."""
        r = self.r
        framing = r.choice(FRAMINGS)
        variant = r.randrange(16)
        if framing == "longer" and variant == 15:
            ending = "hold"  # the body never comes, and the client waits: a slow body
        elif framing in ("longer", "cut", "chunked-cut"):
            ending = r.choice(["eof", "close"])
        elif framing in ("shorter", "chunked-bad", "lengths"):
            ending = "eof"  # the server may wait for what an odd length promised ("5, 5" is 5)
        else:
            ending = "read"
        path = case.path
        if case.family == "ui" and r.random() < 0.5:
            path = r.choice(["/ui/../secret.txt", "/ui/../fuzzed.toml", "/ui/../../../etc/passwd"])
        shape = describe([f"raw {framing}/{variant} then {ending}", case.shape])
        return attrs.evolve(
            case, path=path, shape=shape, framing=framing, variant=variant, ending=ending
        )


def describe(words: list[str]) -> str:
    return ", ".join(word for word in words if word) or "plain"


# -- sending -----------------------------------------------------------------------------------------


def raw_request(case: Case, path: str, body: bytes, port: int) -> bytes:
    """The bytes of ``case`` as its framing wants them."""
    framing, variant = case.framing, case.variant
    host = f"127.0.0.1:{port}".encode()
    line = f"{case.method} {path} HTTP/1.1".encode()
    headers: list[bytes] = [b"Host: " + host]
    headers += [name + b": " + value for name, value in case.headers]
    length: list[bytes] = [str(len(body)).encode()]
    sent = body
    if framing == "longer":
        length = [str(len(body) + 1 + variant * 97).encode()]
    elif framing == "shorter":
        length = [str(max(0, len(body) - 1 - variant)).encode()]
        sent = body + b"GARBAGE / HTTP/1.1\r\n\r\n" if variant % 2 else body
    elif framing == "cut":
        sent = body[: len(body) * variant // 16]
    elif framing in ("chunked-bad", "chunked-cut", "both"):
        headers.append(b"Transfer-Encoding: chunked")
        length = [str(len(body)).encode()] if framing == "both" else []
        chunk = f"{len(body):x}".encode() + b"\r\n" + body + b"\r\n"
        if framing == "chunked-bad":
            sizes = (b"zz", b"-1", b"ffffffffffffffffffff", b"1;" + b"x" * 9000, b"")
            chunk = sizes[variant % len(sizes)] + b"\r\n" + body + b"\r\n"
        sent = chunk if framing == "chunked-cut" else chunk + b"0\r\n\r\n"
    elif framing == "lengths":
        values = [*BAD_LENGTHS, b"10\r\nContent-Length: 20"]
        value = values[variant % len(values)]
        length = [str(len(body)).encode(), value] if variant >= len(values) else [value]
    elif framing == "header-bytes":
        headers.append(ODD_HEADER_LINES[variant % len(ODD_HEADER_LINES)])
    elif framing == "huge-header":
        size = (20_000, 70_000, 200_000)[variant % 3]
        headers.append(b"X-Participant-Id: " + b"p" * size)
    elif framing == "request-line":
        lines = (
            line[:-3] + b"1.0",
            f"{case.method} http://127.0.0.1:{port}{path} HTTP/1.1".encode(),
            line.lower(),
            line[:-3] + b"9.9",
            line.replace(b" ", b"  "),
            f"{case.method} {path}\x00 HTTP/1.1".encode(),
            f"{case.method} {path}?\xff\xfe HTTP/1.1".encode("latin-1"),
            b"GARBAGE",
            f"{case.method} *{path} HTTP/1.1".encode(),
            f"BREW {path} HTTP/1.1".encode(),
            f"{case.method} {path}".encode(),
        )
        line = lines[variant % len(lines)]
        if variant == 11:
            headers = headers[1:]  # no Host
        elif variant == 12:
            headers.append(b"Host: evil.example")
    headers += [b"Content-Length: " + value for value in length if body or framing != "exact"]
    if not (framing == "shorter" and variant % 2):
        # Else Hypercorn keeps the connection for its keep-alive time (5 s) after the answer,
        # also after a half-close; the odd "shorter" cases want the rest read as a request.
        headers.append(b"Connection: close")
    eol = b"\n" if framing == "header-bytes" and variant == 15 else b"\r\n"
    return eol.join([line, *headers]) + eol + eol + sent


@attrs.frozen
class Answer:
    """What came back: the statuses seen, the text (at most 64 KiB), and whether it timed out or
    the connection failed."""

    statuses: tuple[int, ...]
    text: str
    timed_out: bool = False
    failure: str = ""


async def send_raw(case: Case, data: bytes, port: int, patience: float) -> Answer:
    """Send ``data`` on a new connection, end as ``case.ending`` says, read what comes back."""
    received = bytearray()
    failure = ""
    with anyio.move_on_after(patience) as scope:
        try:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(data)
                if case.ending == "close":
                    return Answer((), "")
                if case.ending == "eof":
                    await stream.send_eof()
                while len(received) < 65536:
                    received += await stream.receive()
        except anyio.EndOfStream:
            pass
        except (anyio.BrokenResourceError, OSError) as error:
            failure = type(error).__name__
    statuses = tuple(int(s) for s in re.findall(rb"HTTP/1\.[01] (\d{3}) ", bytes(received)))
    text = bytes(received).decode(errors="replace")
    # A status and no end is an answer (an event stream stays open by design), not a hang.
    return Answer(statuses, text, scope.cancelled_caught and not statuses, failure)


async def send_http(http: httpx.AsyncClient, case: Case, path: str, body: bytes) -> Answer:
    try:
        # An absolute URL: httpx takes a relative one starting with "//" for a host.
        url = f"{http.base_url}".rstrip("/") + path
        async with http.stream(
            case.method, url, headers=list(case.headers), content=body or None
        ) as response:
            chunks: list[bytes] = []
            size = 0
            stream = "event-stream" in response.headers.get("content-type", "")
            with anyio.move_on_after(0.5 if stream else http.timeout.read or 15):
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > 65536:
                        break
            return Answer((response.status_code,), b"".join(chunks).decode(errors="replace"))
    except httpx.TimeoutException:
        return Answer((), "", timed_out=True)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return Answer((), "", failure=type(error).__name__)


def leak_in(text: str, secret: str) -> str:
    """The first thing in ``text`` an answer must not carry ('' when nothing)."""
    if secret in text:
        return "the planted secret"
    for word in LEAKS:
        if word in text:
            return word
    found = LEAK_PATTERN.search(text)
    return found.group(0) if found else ""


def rss_kib(pid: int) -> int:
    """The process's resident memory; 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@attrs.frozen
class Flight:
    """A case's time in flight (``time.time()``, as the log's times), and how odd its answer was
    (0: a 5xx or a leak, 1: none, 2: another)."""

    begun: float
    ended: float
    label: str
    odd: int


@attrs.define
class Tally:
    """The run's counts, one example per distinct finding, and each case's time in flight."""

    counts: Counter[str] = attrs.field(factory=Counter)
    statuses: Counter[str] = attrs.field(factory=Counter)
    findings: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    flights: list[Flight] = attrs.field(factory=list)

    def find(self, kind: str, key: str, example: str) -> None:
        self.counts[kind] += 1
        finding = self.findings.setdefault(f"{kind}: {key}", {"count": 0, "example": example})
        finding["count"] += 1

    def record(self, case: Case, answer: Answer, begun: float, secret: str) -> None:
        """Count ``answer`` to ``case``, sent at ``begun``."""
        self.counts["sent"] += 1
        kind = "raw" if case.framing else case.family
        for status in answer.statuses:
            self.statuses[f"{kind} {status}"] += 1
            if status >= 500:
                key = f"{status} {case.method} {case.route} ({kind})"
                self.find("5xx", key, f"{label(case)} -> {answer.text[:400]!r}")
        if not answer.statuses:
            self.statuses[f"{kind} {answer.failure or 'no answer'}"] += 1
        leak = leak_in(answer.text, secret)
        if leak:
            key = f"{leak!r} in {case.method} {case.route} ({kind})"
            self.find("leaks", key, f"{label(case)} -> {answer.text[:600]!r}")
        if answer.timed_out and case.ending == "hold":
            self.counts["held"] += 1
        elif answer.timed_out:
            self.find("hangs", f"{case.method} {case.route} ({kind})", label(case))
        elif answer.failure and case.framing is None:
            self.find("transport", f"{answer.failure} {case.route}", label(case))
            # Refused on loopback: the server no longer listens.
            self.counts["refused"] += answer.failure == "ConnectError"
        bad = bool(leak) or any(status >= 500 for status in answer.statuses)
        odd = 0 if bad else 1 if not answer.statuses else 2
        self.flights.append(Flight(begun, time.time(), label(case), odd))


def label(case: Case) -> str:
    return f"{case.method} {case.path[:120]} [{case.shape}] body {case.body[:160]!r}"


async def make_tasks(http: httpx.AsyncClient, known: list[str]) -> None:
    """A few finished tasks of the fuzzer's participant (and one anonymous), for the cases to
    name."""
    for number in range(6):
        headers = {"A2A-Version": "1.0"}
        if number:
            headers["X-Participant-Id"] = OWNER.decode()
        message = {
            "messageId": f"fz-setup-{number}",
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}],
        }
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
        envelope["params"] = {"message": message}
        answer = await http.post("/", json=envelope, headers=headers)
        task = answer.json().get("result", {}).get("task", {})
        if task.get("id"):
            known.append(str(task["id"]))


async def run(
    options: argparse.Namespace, port: int, server: subprocess.Popen[bytes], secret: str
) -> dict[str, Any]:
    """Make a few tasks, then send the cases; stop early if the server dies."""
    pid = server.pid
    cases = Cases(options.seed)
    tally = Tally()
    known: list[str] = []
    rss = {"before": rss_kib(pid)}
    limits = httpx.Limits(max_connections=options.concurrency + 2)
    timeout = httpx.Timeout(options.timeout)
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as http:
        await make_tasks(http, known)
        started = time.monotonic()
        sent = 0

        async def one(number: int, case: Case) -> None:
            # Recent tasks half the time: those may still be running.
            pool = (known[-8:] if number % 2 else known) or ["nope"]
            task = pool[number // 2 % len(pool)]
            path = case.path.replace(TASK, task)
            body = case.body.replace(TASK.encode(), task.encode())
            begun = time.time()
            if case.framing is None:
                answer = await send_http(http, case, path, body)
            else:
                data = raw_request(case, path, body, port)
                answer = await send_raw(case, data, port, options.raw_timeout)
            tally.record(case, answer, begun, secret)
            if case.family == "valid" and answer.statuses == (200,):
                found = re.search(r'"id":\s*"([0-9a-f-]{36})"', answer.text)
                if found and len(known) < 500:
                    known.append(found.group(1))

        async def worker() -> None:
            nonlocal sent
            while sent < options.cases and time.monotonic() - started < options.max_seconds:
                if server.poll() is not None or tally.counts["refused"]:
                    return  # it died (or is dying): the log says why
                sent += 1
                if sent == options.cases // 2:
                    rss["middle"] = rss_kib(pid)
                await one(sent, cases.next())

        async with anyio.create_task_group() as tg:
            for _ in range(options.concurrency):
                tg.start_soon(worker)
        elapsed = time.monotonic() - started
        # Requests the client gave up on may still be logged; give the server a moment.
        await anyio.sleep(2)
    rss["end"] = rss_kib(pid)
    return {
        "tally": tally,
        "rss_kib": rss,
        "seconds": elapsed,
        "capped": tally.counts["sent"] < options.cases,
        "died": server.poll() is not None,
        "tasks": len(known),
    }


# -- the server and its log ---------------------------------------------------------------------------


def write_config(directory: Path, port: int, secret: str) -> Path:
    """The agent's config, its ``ui_dir``, and the secret planted beside it."""
    ui = directory / "ui"
    ui.mkdir()
    (ui / "index.html").write_text("<p>fuzz</p>\n")
    (directory / "secret.txt").write_text(secret + "\n")
    config = directory / "fuzzed.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [agent]
            id = "fuzzed"

            [server]
            bind = "127.0.0.1:{port}"
            max_request_bytes = 262144
            ui_dir = "{ui}"

            [model]
            kind = "echo"
            delay = 0.3

            [[agents]]
            id = "peer"
            url = "http://127.0.0.1:9/"
            headers = ["Authorization={SECRET_VARIABLE}"]
            """
        )
    )
    return config


def log_report(text: str, secret: str, flights: list[Flight]) -> dict[str, Any]:
    """The log's counts, and each distinct ERROR (or traceback) record with its last frames and the
    requests in flight when it was written."""
    lines = text.splitlines()
    records: list[dict[str, Any]] = []
    not_json: list[str] = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            if line.strip():
                not_json.append(line)
    troubles: dict[str, dict[str, Any]] = {}
    for record in records:
        level = str(record.get("level", ""))
        if level not in ("ERROR", "CRITICAL") and "exc" not in record:
            continue
        message = re.sub(r"[0-9a-f]{12,}|\d+", "N", str(record.get("message", "")))[:200]
        key = f"{level} {record.get('logger')}: {message}"
        trouble = troubles.setdefault(key, {"count": 0, "record": record})
        trouble["count"] += 1
    for trouble in troubles.values():
        record = trouble.pop("record")
        trouble["time"] = record.get("time")
        trouble["last_frames"] = str(record.get("exc", "")).splitlines()[-7:]
        trouble["in_flight"] = in_flight(str(record.get("time", "")), flights)
    return {
        "bytes": len(text.encode()),
        "lines": len(lines),
        "error_lines": sum(1 for r in records if r.get("level") in ("ERROR", "CRITICAL")),
        "exc_records": sum(1 for r in records if "exc" in r),
        "tracebacks": text.count("Traceback"),
        "not_json": len(not_json),
        "not_json_first": not_json[:5],
        "secret_unmasked": text.count(secret),
        "warnings": Counter(
            re.sub(r"\d+", "N", str(r.get("message", "")))[:90]
            for r in records
            if r.get("level") == "WARNING"
        ).most_common(6),
        "troubles": troubles,
    }


def in_flight(stamp: str, flights: list[Flight]) -> list[str]:
    """Four requests in flight at ``stamp`` (an ISO time of the log), the oddest answers first,
    then those that ended nearest to it: the record's cause is likely among them."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return []
    near = [
        (f.odd, abs(f.ended - when), f.label)
        for f in flights
        if f.begun - 0.05 <= when <= f.ended + 0.5
    ]
    return [what for _, _, what in sorted(near)[:4]]


def serve(options: argparse.Namespace) -> dict[str, Any] | None:
    """Start the server, fuzz it, stop it, read its log; None when it did not start."""
    secret = f"fz-planted-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(prefix="harness-fuzz-") as name:
        directory = Path(name)
        port = free_port()
        config = write_config(directory, port, secret)
        log_path = directory / "serve.log"
        command = [sys.executable, "-m", "harness_core.cli", "serve", str(config)]
        command += ["--log-format", "json", "--backend", options.backend]
        environment = {**os.environ, SECRET_VARIABLE: secret}
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment
            )
        report: dict[str, Any] | None = None
        try:
            deadline = time.monotonic() + 60
            while "serving 1 agent" not in log_path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    print(log_path.read_text(errors="replace"), file=sys.stderr)
                    return None
                time.sleep(0.05)
            report = anyio.run(run, options, port, process, secret)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                exit_code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                exit_code = process.wait()
        text = log_path.read_text(errors="replace")
        if options.log:
            Path(options.log).write_text(text)
    report["server_exit"] = exit_code
    report["log"] = log_report(text, secret, report["tally"].flights)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds before a hang")
    parser.add_argument(
        "--raw-timeout", type=float, default=3.0, help="seconds a raw-socket case may take"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=600.0, help="stop sending after this long"
    )
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--quick", action="store_true", help="1,000 cases")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--log", help="keep a copy of the server's log in this file")
    options = parser.parse_args(argv)
    if options.quick:
        options.cases = 1000
    report = serve(options)
    if report is None:
        return 1
    tally: Tally = report.pop("tally")
    counts = tally.counts
    summary = {
        "cases": counts["sent"],
        "seconds": round(report["seconds"], 1),
        "capped": report["capped"],
        "died": report["died"],
        "seed": options.seed,
        "backend": options.backend,
        "counts": {name: counts[name] for name in ("5xx", "leaks", "hangs", "transport", "held")},
        "statuses": dict(sorted(tally.statuses.items())),
        "findings": tally.findings,
        "tasks": report["tasks"],
        "rss_kib": report["rss_kib"],
        "log": report["log"],
        "server_exit": report["server_exit"],
    }
    if options.json:
        print(json.dumps(summary, indent=2))
        return 0
    capped = " (stopped by --max-seconds)" if report["capped"] else ""
    if report["died"]:
        capped = " (stopped: THE SERVER DIED; see its last lines below)"
    print(
        f"{counts['sent']} cases in {report['seconds']:.1f} s{capped}, seed {options.seed}, "
        f"concurrency {options.concurrency}, {options.backend}, {report['tasks']} tasks named"
    )
    for name in ("5xx", "leaks", "hangs", "transport", "held"):
        print(f"  {name:10} {counts[name]}")
    rss = report["rss_kib"]
    print(f"  rss KiB    before {rss['before']}, middle {rss.get('middle', 0)}, end {rss['end']}")
    log = report["log"]
    print(
        f"  log        {log['bytes']} bytes, {log['lines']} lines, {log['error_lines']} ERROR, "
        f"{log['exc_records']} with exc_info, {log['tracebacks']} tracebacks, "
        f"{log['not_json']} not JSON, secret unmasked {log['secret_unmasked']}"
    )
    print(f"  server exit code {report['server_exit']}")
    print("  statuses   " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.statuses.items())))
    for key, finding in tally.findings.items():
        print(f"  {key} (x{finding['count']})\n      e.g. {finding['example']}")
    for key, trouble in log["troubles"].items():
        print(f"  log {key} (x{trouble['count']}, first at {trouble['time']})")
        for frame in trouble["last_frames"]:
            print(f"      | {frame}")
        for what in trouble["in_flight"]:
            print(f"      in flight: {what}")
    for line in log["not_json_first"]:
        print(f"  not JSON: {line[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
