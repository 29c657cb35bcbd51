"""The A2A proto builders give exactly what ``json_format.ParseDict`` gives, for any task the core
could hold and for values they leave to it (hypothesis)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from a2a.types import Message, Task, TaskState
from google.protobuf.json_format import ParseDict
from hypothesis import given, settings
from hypothesis import strategies as st

from harness_asgi.protos import message_proto, task_proto

_text = st.text(max_size=12)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_objects = st.dictionaries(_text, _json, max_size=3)
_stamp = st.datetimes(timezones=st.just(__import__("datetime").UTC)).map(
    lambda d: d.isoformat().replace("+00:00", "Z")
)
_bytes = st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())


def _with_odd(fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Sometimes a key or value the builders leave to ParseDict: an unknown key, a snake_case
    name, a number where a string goes, a null, an enum by number."""
    odd = st.sampled_from(
        [
            {"unknownKey": 1},
            {"message_id": "x"},
            {"contextId": 7},
            {"metadata": None},
            {"role": 1},
            {"state": 3},
            {"parts": None},
            {"url": "u"},  # a part with two contents: the parser refuses it
            {"data": 1},
        ]
    )
    return st.one_of(fields, st.tuples(fields, odd).map(lambda t: {**t[0], **t[1]}))


_part = _with_odd(
    st.one_of(
        st.fixed_dictionaries({"text": _text}),
        st.fixed_dictionaries({"url": _text}, optional={"mediaType": _text, "filename": _text}),
        st.fixed_dictionaries({"raw": _bytes}, optional={"mediaType": _text}),
        st.fixed_dictionaries({"data": _json}),
    ).flatmap(
        lambda p: st.fixed_dictionaries({}, optional={"metadata": _objects}).map(
            lambda m: {**p, **m}
        )
    )
)
_message = _with_odd(
    st.fixed_dictionaries(
        {"messageId": _text, "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT"])},
        optional={
            "parts": st.lists(_part, max_size=3),
            "taskId": _text,
            "contextId": _text,
            "metadata": _objects,
            "extensions": st.lists(_text, max_size=2),
            "referenceTaskIds": st.lists(_text, max_size=2),
        },
    )
)
_artifact = _with_odd(
    st.fixed_dictionaries(
        {"artifactId": _text, "parts": st.lists(_part, max_size=2)},
        optional={"name": _text, "description": _text, "metadata": _objects},
    )
)
_status = _with_odd(
    st.fixed_dictionaries(
        {"state": st.sampled_from(TaskState.keys())},
        optional={"timestamp": _stamp, "message": _message},
    )
)
_task = _with_odd(
    st.fixed_dictionaries(
        {"id": _text, "contextId": _text, "status": _status},
        optional={
            "history": st.lists(_message, max_size=3),
            "artifacts": st.lists(_artifact, max_size=2),
            "metadata": _objects,
        },
    )
)


def _same(build: Any, kind: Any, value: dict[str, Any]) -> None:
    try:
        expected = ParseDict(value, kind(), ignore_unknown_fields=True)
    except Exception as error:  # the builder then raises what the parser raises
        with pytest.raises(type(error)):
            build(value)
        return
    assert build(value) == expected


@settings(max_examples=400, deadline=None)
@given(_task)
def test_a_task_is_built_as_the_parser_builds_it(task: dict[str, Any]) -> None:
    _same(task_proto, Task, task)


@settings(max_examples=200, deadline=None)
@given(_message)
def test_a_message_is_built_as_the_parser_builds_it(message: dict[str, Any]) -> None:
    _same(message_proto, Message, message)


def test_a_stored_task_with_every_kind_of_part_is_built_directly(monkeypatch) -> None:
    task = {
        "id": "t",
        "contextId": "c",
        "status": {
            "state": "TASK_STATE_COMPLETED",
            "timestamp": "2026-12-04T20:00:00.123456Z",
            "message": {"messageId": "t:final", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]},
        },
        "history": [
            {
                "messageId": "m",
                "role": "ROLE_USER",
                "parts": [
                    {"text": "hi", "metadata": {"k": [1, None, {"x": True}]}},
                    {"raw": base64.b64encode(b"\x00\xff").decode(), "mediaType": "a/b"},
                    {"url": "https://example.com/f", "filename": "f"},
                    {"data": {"n": 1.5}},
                ],
                "metadata": {"harness.delegation": {"agent": "b"}},
            }
        ],
        "artifacts": [{"artifactId": "a", "name": "n", "parts": [{"data": [1, "two"]}]}],
        "metadata": {"harness.declined": {"turn": 1}},
    }
    expected = ParseDict(task, Task(), ignore_unknown_fields=True)

    def no_parser(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the builder gave the task to ParseDict")

    monkeypatch.setattr("harness_asgi.protos.ParseDict", no_parser)
    assert task_proto(task) == expected
    assert expected.history[0].parts[1].raw == b"\x00\xff"
