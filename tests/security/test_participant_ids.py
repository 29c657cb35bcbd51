"""Participant ids that cannot be ones: too long, or with control characters. Each is a 400 that
says why, before any method runs; before, any header value was taken as it came. (An agent's own
id, ``agent:<id>``, is what a delegation of an anonymous task sends as: it stays allowed, as any
name a gateway asserts in header mode is.)"""

from __future__ import annotations

import httpx
import pytest

from harness_core import ScriptedModel
from tests.conftest import serving

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("participant", "why"),
    [
        ("x" * 257, "at most 256"),
        ("al\x7fice", "control characters"),
    ],
)
async def test_a_participant_id_that_cannot_be_one_is_refused(make_harness, participant, why):
    harness = make_harness(ScriptedModel(["never"]))
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
    async with serving(harness) as url, httpx.AsyncClient() as http:
        answer = await http.post(
            url + "/", json=body, headers={"X-Participant-Id": participant, "A2A-Version": "1.0"}
        )
        listed = await http.post(
            url + "/",
            json={"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}},
            headers={"A2A-Version": "1.0"},
        )
    assert answer.status_code == 400
    assert why in answer.text and "Traceback" not in answer.text
    # Nothing was started: the anonymous listing (which shows anonymous tasks) is empty too,
    # and the agent's model was never asked.
    assert listed.status_code == 200 and listed.json()["result"].get("tasks", []) == []
