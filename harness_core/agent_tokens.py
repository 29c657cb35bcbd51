"""An agent's own credential: a short-lived JWT it signs with its card key for each call to another
agent, so the other side knows which agent calls and for whom.

An agent with ``[card] signing_key_env`` sends ``Authorization: Bearer <token>`` with every
delegation call (only to the target's origin). The token says, in the claims a gateway's token
uses (``[auth] identity_claim`` and ``tenant_claim``):

- ``iss``: the calling agent's origin, ``jku``: its public key set (``<its URL>/.well-known/jwks.json``),
  ``kid``: its card key's id; EdDSA;
- ``aud``: the target's endpoint URL (no trailing ``/``), ``exp``: ``LIFETIME`` seconds from now;
- the identity: ``{"key": <participant>, "kind": "agent", "name": <calling agent's id>}``, the
  participant on whose behalf the agent acts, who then owns the remote task;
- the tenant: the target agent (its id in this group, or ``[[agents]] tenant``, else its
  configured id).

A push of a task's update to a webhook that has no authentication of its own carries a callback
token instead (``callback_token``: ``aud`` = the push URL, 5 minutes, the same key and ``jku``).

The receiving side takes it from an agent of its own process with no configuration (it holds the
key), and from elsewhere where its ``[auth] gateway_origins`` lists the caller's origin
(``harness_asgi.gateway``). So delegation works in strict mode and across hosts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import jwt

from harness_core.config.values import web_origin
from harness_core.errors import ConfigError

__all__ = ["CALLBACK_LIFETIME", "JWKS_PATH", "LIFETIME", "AgentCredential"]

#: Where an agent's public key set is served, below its URL.
JWKS_PATH = "/.well-known/jwks.json"
#: Seconds an agent token is valid.
LIFETIME = 120
#: Seconds a push's callback token is valid (a gateway takes them up to 10 minutes old).
CALLBACK_LIFETIME = 300


class AgentCredential:
    """Mints one agent's tokens for its calls to other agents."""

    def __init__(
        self,
        jwk_text: str,
        *,
        agent_id: str,
        url: Callable[[], str],
        identity_claim: str,
        tenant_claim: str,
        source: str = "card.signing_key_env",
    ) -> None:
        try:
            jwk = json.loads(jwk_text)
            self._kid = str(jwk["kid"])
            self._key = jwt.PyJWK(jwk, algorithm="EdDSA")
        except (ValueError, KeyError, TypeError, jwt.PyJWTError):
            # Never the key's text: it is the secret.
            raise ConfigError(
                f"agent {agent_id}: the key {source} names is not a private Ed25519 JWK with a kid"
            ) from None
        self._agent_id = agent_id
        self._url = url
        self._identity_claim = identity_claim
        self._tenant_claim = tenant_claim

    @property
    def jku(self) -> str:
        """The calling agent's public key set (it follows the agent's public URL)."""
        return self._url().rstrip("/") + JWKS_PATH

    def token(self, *, audience: str, tenant: str, participant: str) -> str:
        """A token for one call to the agent at ``audience`` (its endpoint URL), as ``tenant``,
        on behalf of ``participant``."""
        jku = self.jku
        now = int(time.time())
        claims = {
            "iss": web_origin(jku),
            "aud": audience.rstrip("/"),
            "iat": now,
            "exp": now + LIFETIME,
            self._identity_claim: {"key": participant, "kind": "agent", "name": self._agent_id},
            self._tenant_claim: tenant,
        }
        return jwt.encode(
            claims, self._key.key, algorithm="EdDSA", headers={"kid": self._kid, "jku": jku}
        )

    def callback_token(self, url: str) -> str:
        """A token for one push to the webhook at ``url``: ``aud`` is that exact URL, so the
        receiver knows the update comes from this agent (its card key) and was meant for it."""
        now = int(time.time())
        claims = {"aud": url, "iat": now, "exp": now + CALLBACK_LIFETIME}
        return jwt.encode(
            claims, self._key.key, algorithm="EdDSA", headers={"kid": self._kid, "jku": self.jku}
        )
