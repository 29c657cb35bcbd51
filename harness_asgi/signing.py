"""Signed agent cards: the Ed25519 key, its public JWKS, and a JWS on every card served.

Issue "Signed cards" (A2A §8.4; the behaviour of loopingai-core's ``signCard``). The key is a
private JWK (OKP, Ed25519, with a ``kid``) read at start from the variable ``[card]
signing_key_env`` names. Its public half is served as a JWKS at ``JWKS_PATH``, and
:meth:`CardSigner.sign` adds a detached JWS over the card's RFC 8785 canonical form, with the
protected header ``{alg: EdDSA, kid, typ: JOSE, jku}``, through a2a-sdk's own signer, so that
a2a-sdk's verifier (``create_signature_verifier``) accepts it.

What is signed is what is served. ``create_agent_card_routes`` serves ``agent_card_to_dict`` of the
proto its ``card_modifier`` returns, so ``sign`` takes and returns that proto: the SDK's signer
canonicalizes ``MessageToDict(card)``, the same JSON the route serves. A dict that was encoded
already must never be signed and encoded again: the second encoding collapses the oneof in
``securitySchemes`` to ``{}`` and no signature verifies (the double-encoding trap). ``sign`` also
refuses a card the SDK would serve with merged v0.3 fields (an interface with an empty or 0.x
``protocol_version``): a2a-sdk's verifier parses them away, but a verifier that canonicalizes the
served JSON as it is would see keys the signature does not cover.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, cast
from weakref import WeakKeyDictionary

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCard
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.signing import ProtectedHeader, create_agent_card_signer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from google.protobuf.json_format import MessageToDict
from jwt import PyJWK
from jwt.utils import base64url_decode, base64url_encode
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness_core.agent_tokens import JWKS_PATH
from harness_core.config import Settings
from harness_core.config.values import url_problem
from harness_core.errors import CardSigningError, SigningKeyError
from harness_core.harness import Harness

__all__ = [
    "ALGORITHM",
    "JWKS_CACHE_CONTROL",
    "JWKS_PATH",
    "CardSigner",
    "Jwks",
    "combined_jwks",
    "create_jwks_routes",
]

#: The JWS algorithm of every card signature (RFC 8037's name, which verifiers still expect).
ALGORITHM = "EdDSA"
#: Where the JWKS is served, beside the card; the ``jku`` of a signature is its full URL.
#: Keys change only when the agent restarts with another one, as the card does.
JWKS_CACHE_CONTROL = "public, max-age=300"

#: A JWK Set: ``{"keys": [public JWK, ...]}``.
Jwks = dict[str, list[dict[str, str]]]

_KEY_SHAPE = (
    'a private Ed25519 JWK: a JSON object with "kty": "OKP", "crv": "Ed25519", "kid", "x" and "d"'
)
# 32 bytes in base64url without padding (RFC 7515 §2), as RFC 8037 writes Ed25519's d and x.
_KEY_BYTES = re.compile(r"[A-Za-z0-9_-]{43}")


class _KeyProblem(Exception):
    """What is wrong with a JWK, in words that never show its values."""


class CardSigner:
    """Signs agent cards with one private Ed25519 key, and publishes the key's public half."""

    __slots__ = ("_key", "_public", "kid")

    def __init__(self, jwk: Mapping[str, object], *, source: str = "the card signing key") -> None:
        """Check ``jwk`` (a private OKP/Ed25519 JWK with ``kid``, ``x`` and ``d``).

        Raises :class:`SigningKeyError` starting with ``source`` and saying what is wrong (not
        Ed25519, no ``kid``, no ``d``, an ``x`` that is not ``d``'s public key...), never a value.
        """
        try:
            kid, d, x = _read_private_jwk(jwk)
        except _KeyProblem as problem:
            raise SigningKeyError(f"{source} {problem}; it must be {_KEY_SHAPE}") from None
        #: The key's id: the ``kid`` of its signatures and of its entry in the JWKS.
        self.kid: str = kid
        self._key = PyJWK({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x, "d": d}, ALGORITHM)
        # Built from the public members alone, so no private member can ever reach the JWKS.
        self._public = {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": x,
            "kid": kid,
            "use": "sig",
            "alg": ALGORITHM,
        }

    @classmethod
    def from_json(cls, text: str, *, source: str = "the card signing key") -> CardSigner:
        """The signer of the JWK in ``text`` (JSON); :class:`SigningKeyError` as for the constructor."""
        try:
            jwk = json.loads(text)
        except ValueError:
            # Never chained: a JSONDecodeError carries the whole text, the key with it.
            raise SigningKeyError(f"{source} is not JSON; it must be {_KEY_SHAPE}") from None
        if not isinstance(jwk, dict):
            raise SigningKeyError(f"{source} is not a JSON object; it must be {_KEY_SHAPE}")
        return cls(cast(dict[str, object], jwk), source=source)

    @classmethod
    def from_settings(cls, settings: Settings) -> CardSigner | None:
        """The signer of the key in the variable ``[card] signing_key_env`` names, or None when
        none is named (cards are served unsigned). Call it at start.

        An unset or empty variable raises :class:`~harness_core.errors.ConfigError`, a value that
        is not a usable key :class:`SigningKeyError` (a ``ConfigError`` too); both name the file,
        the variable and ``card.signing_key_env``, never the value.
        """
        text = settings.card_signing_key()
        if text is None:
            return None
        source = (
            f"{settings.label}: environment variable {settings.card.signing_key_env} "
            "(named by card.signing_key_env)"
        )
        return cls.from_json(text, source=source)

    def __repr__(self) -> str:
        return f"CardSigner(kid={self.kid!r})"

    @property
    def public_jwk(self) -> dict[str, str]:
        """The public key: ``kty``, ``crv``, ``x``, ``kid``, ``use: "sig"``, ``alg: "EdDSA"``."""
        return dict(self._public)

    def jwks(self) -> Jwks:
        """The JWKS of this key alone: ``{"keys": [public_jwk]}``."""
        return combined_jwks([self])

    def sign(self, card: AgentCard, jku: str) -> AgentCard:
        """A signed copy of ``card``; ``card`` itself is not changed.

        The copy carries one more signature (those already on ``card`` stay: several keys may sign
        one card): a JWS by this key over the card's RFC 8785 form without its signatures, with
        the protected header ``{alg: "EdDSA", kid, typ: "JOSE", jku}``. Serve the copy as it is,
        the proto: return it from ``create_agent_card_routes``' ``card_modifier``, or from an
        extended card modifier.

        Raises :class:`CardSigningError` when ``jku`` is not an http(s) URL, a REQUIRED field of
        the card is empty (SDKs canonicalize an empty REQUIRED field differently, A2A#2122), or
        the SDK would serve the card with v0.3 fields that the signature does not cover.
        """
        problem = url_problem(jku)
        if problem is not None:
            raise CardSigningError(f"jku {jku!r} {problem}")
        _check_signable(card)
        signed = AgentCard()
        signed.CopyFrom(card)
        header: ProtectedHeader = {"alg": ALGORITHM, "kid": self.kid, "typ": "JOSE", "jku": jku}
        # The SDK's signer appends to the card it is given (a2a-sdk notes, gotcha 15): the copy.
        return create_agent_card_signer(self._key, header)(signed)


def combined_jwks(signers: Iterable[CardSigner]) -> Jwks:
    """One JWKS for several signers (the agents of one origin): each key once, in order.

    Signers that share a ``kid`` must hold the same key; two different keys under one ``kid``
    raise :class:`SigningKeyError`, since a verifier picks the key by its ``kid``.
    """
    keys: dict[str, dict[str, str]] = {}
    for signer in signers:
        jwk = signer.public_jwk
        if keys.setdefault(signer.kid, jwk) != jwk:
            raise SigningKeyError(
                f"two different card signing keys have the kid {signer.kid!r}; give each key "
                "its own kid (verifiers find the key by it)"
            )
    return {"keys": list(keys.values())}


def create_jwks_routes(
    jwks: Jwks, *, path: str = JWKS_PATH, cache_control: str = JWKS_CACHE_CONTROL
) -> list[Route]:
    """``GET path``: ``jwks`` (from :meth:`CardSigner.jwks` or :func:`combined_jwks`) as JSON,
    with ``Cache-Control: cache_control``. A key with a private member ``d`` is refused
    (:class:`SigningKeyError`) rather than served."""
    if any("d" in key for key in jwks["keys"]):
        raise SigningKeyError("a JWKS to serve holds a private key (d); serve public keys only")
    body = json.dumps(jwks, separators=(",", ":")).encode()
    headers = {"Cache-Control": cache_control}

    async def serve_jwks(_: Request) -> Response:
        return Response(body, media_type="application/json", headers=headers)

    return [Route(path, serve_jwks, methods=["GET"])]


def _read_private_jwk(jwk: Mapping[str, object]) -> tuple[str, str, str]:
    """``kid``, ``d`` and ``x`` of a private Ed25519 JWK (``x`` derived when absent)."""
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise _KeyProblem("is not an Ed25519 key")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid.strip():
        raise _KeyProblem("has no kid (verifiers find the key by it)")
    if jwk.get("alg", ALGORITHM) != ALGORITHM:
        raise _KeyProblem(f'has an alg other than "{ALGORITHM}"')
    if jwk.get("use", "sig") != "sig":
        raise _KeyProblem('has a use other than "sig"')
    d = jwk.get("d")
    if d is None:
        raise _KeyProblem("is a public key (it has no d)")
    if not isinstance(d, str) or _KEY_BYTES.fullmatch(d) is None:
        raise _KeyProblem("has a d that is not 32 bytes in base64url")
    private = Ed25519PrivateKey.from_private_bytes(base64url_decode(d))
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    x = base64url_encode(public).decode("ascii")
    if jwk.get("x", x) != x:
        raise _KeyProblem("has an x that is not the public key of its d")
    return kid, d, x


def _check_signable(card: AgentCard) -> None:
    """Refuse a card whose signature some verifier would reject (see ``CardSigner.sign``)."""
    try:
        validate_proto_required_fields(card)
    except InvalidParamsError as exc:
        data: Any = getattr(exc, "data", None) or {}
        fields = ", ".join(str(error["field"]) for error in data.get("errors", []))
        raise CardSigningError(
            f"card {card.name!r} cannot be signed: REQUIRED fields are empty ({fields}); SDKs "
            "canonicalize an empty REQUIRED field differently (A2A#2122), so fill them"
        ) from None
    wire = MessageToDict(card)
    served = agent_card_to_dict(card)
    wire.pop("signatures", None)
    served.pop("signatures", None)
    if served != wire:
        merged = ", ".join(sorted(served.keys() - wire.keys())) or "inside its objects"
        raise CardSigningError(
            f"card {card.name!r} cannot be signed: a2a-sdk would serve it with v0.3 fields "
            f"({merged}) that the signature does not cover, because an interface has an empty "
            "or 0.x protocol_version; give every interface protocol_version '1.0'"
        )


_LOCAL: WeakKeyDictionary[Harness, CardSigner] = WeakKeyDictionary()
"""The card keys of this process's agents: a token one of them signs is checked with its key,
here, without a fetch (``harness_asgi.gateway.verify_local_agent_token``)."""


def register_local(harness: Harness, signer: CardSigner) -> None:
    """``harness`` signs with ``signer`` (its key set at ``<its URL>/.well-known/jwks.json``)."""
    _LOCAL[harness] = signer


def local_signer(jku: str) -> CardSigner | None:
    """The key of the agent of this process whose key set is at ``jku``, if one is."""
    for harness, signer in list(_LOCAL.items()):
        if harness.public_url.rstrip("/") + JWKS_PATH == jku:
            return signer
    return None
