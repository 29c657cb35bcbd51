"""A gateway in front of a group: its tokens name the participant and the one tenant they are for.

End to end over real loopback: the gateway's key set is served over TLS (a certificate made for
127.0.0.1, trusted through ``SSL_CERT_FILE`` as an operator would trust a private CA), the agents
run with ``[auth] gateway_origins`` naming it, and the client is a2a-sdk's, walking from the stub
card to its tenant with a bearer token. Before the wiring, ``[auth]`` did nothing: any caller
reached any tenant.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetExtendedAgentCardRequest, GetTaskRequest, SendMessageRequest, TaskState
from anyio.streams.tls import TLSListener, TLSStream
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID
from jwt.algorithms import OKPAlgorithm

from harness_asgi.gateway import IDENTITY_CLAIM, TENANT_CLAIM
from harness_core import Complete, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.urls import _tls  # pyright: ignore[reportPrivateUsage]
from tests.conftest import agent_settings, serving, unique_id, user_message

pytestmark = pytest.mark.anyio

JWKS = "/.well-known/jwks.json"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "gateway.pem", directory / "gateway.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@asynccontextmanager
async def gateway_keys(directory: Path, jwks: dict[str, Any]) -> AsyncIterator[str]:
    """Serve ``jwks`` over HTTPS on loopback (any path); yield the origin."""
    cert, key = self_signed(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    body = json.dumps(jwks).encode()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def answer(stream: TLSStream) -> None:
        async with stream:
            with anyio.move_on_after(10):
                request = b""
                while b"\r\n\r\n" not in request:
                    request += await stream.receive()
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                await stream.send(head.encode() + body)

    async with anyio.create_task_group() as tg:
        tg.start_soon(TLSListener(listener, context, standard_compatible=False).serve, answer)
        try:
            yield f"https://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()


class Gateway:
    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.key = Ed25519PrivateKey.generate()

    def jwks(self) -> dict[str, Any]:
        public = OKPAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**public, "kid": "g1", "alg": "EdDSA", "use": "sig"}]}

    def token(self, audience: str, tenant: str | None, key: str = "alice", **claims: Any) -> str:
        payload: dict[str, Any] = {
            "iss": self.origin,
            "aud": audience,
            "exp": int(time.time()) + 300,
            IDENTITY_CLAIM: {"key": key},
            **claims,
        }
        if tenant is not None:
            payload[TENANT_CLAIM] = tenant
        headers = {"kid": "g1", "jku": self.origin + JWKS}
        return jwt.encode(payload, self.key, algorithm="EdDSA", headers=headers)


async def echo(ctx: TurnContext) -> TurnResult:
    return Complete(f"{ctx.new_messages[-1].sender} said {ctx.new_messages[-1].text}")


async def test_a_gateway_client_reaches_only_the_tenant_its_token_names(
    tmp_path, temporal_address, monkeypatch
):
    placeholder = Gateway("https://127.0.0.1:1")  # the key, before the origin is known
    async with gateway_keys(tmp_path, placeholder.jwks()) as origin:
        gateway = Gateway(origin)
        gateway.key = placeholder.key
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "gateway.pem"))
        _tls.cache_clear()
        ids = [unique_id("billing"), unique_id("support")]
        harnesses = [
            Harness(
                agent_settings(
                    tmp_path / i, temporal_address, i, auth={"gateway_origins": [origin]}
                ),
                agent=echo,
            )
            for i in ids
        ]
        try:
            async with serving(*harnesses) as url, httpx.AsyncClient(timeout=30) as http:
                billing, support = ids
                bearer = {"Authorization": f"Bearer {gateway.token(url, support)}"}
                stub = await A2ACardResolver(http, url).get_agent_card()
                http.headers.update(bearer)
                root = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(stub)
                card = await root.get_extended_agent_card(
                    GetExtendedAgentCardRequest(tenant=support)
                )
                client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
                    card
                )
                request = SendMessageRequest(message=user_message("hi"), tenant=support)
                [event] = [e async for e in client.send_message(request)]
                read = await client.get_task(GetTaskRequest(id=event.task.id, tenant=support))

                async def rpc(tenant: str, token: str | None) -> httpx.Response:
                    headers = {"A2A-Version": "1.0"}
                    if token is not None:
                        headers["Authorization"] = f"Bearer {token}"
                    return await http.post(
                        f"{url}/",
                        json={
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "ListTasks",
                            "params": {"tenant": tenant},
                        },
                        headers=headers,
                    )

                del http.headers["Authorization"]
                sibling = await rpc(billing, gateway.token(url, support))
                no_token = await rpc(support, None)
                no_claim = await rpc(support, gateway.token(url, None))
                forged = await rpc(support, Gateway(origin).token(url, support))
                other_aud = await rpc(support, gateway.token(url + "/elsewhere", support))
                keyless = await rpc(support, gateway.token(url, support, key=""))
                own = await rpc(billing, gateway.token(url, billing))
                # Through the agent's prefix, the audience is the agent's own URL.
                prefixed = await http.post(
                    f"{url}/agents/{support}/",
                    json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                    headers={
                        "A2A-Version": "1.0",
                        "Authorization": f"Bearer {gateway.token(f'{url}/agents/{support}', support)}",
                    },
                )
        finally:
            _tls.cache_clear()
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert event.task.status.message.parts[0].text == "alice said hi"
    assert read.id == event.task.id
    for refused in (sibling, no_token, no_claim, forged, other_aud):
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert "authorizes tenant" in sibling.text and "'<none>'" in no_claim.text
    assert "missing gateway bearer token" in no_token.text
    assert keyless.status_code == 400 and "identity missing key" in keyless.text
    # The sibling's own tasks, with its own token: none (the refusals started nothing).
    assert own.status_code == 200 and own.json()["result"].get("tasks", []) == []
    tasks = prefixed.json()["result"]["tasks"]
    assert [t["id"] for t in tasks] == [event.task.id]
