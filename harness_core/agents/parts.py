"""Turn values to and from A2A ProtoJSON (``MessageToDict`` shapes: ``raw`` is base64, keys camelCase)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, cast

from harness_core.agents.turn import Artifact, DataPart, FilePart, Part, TextPart, TurnMessage
from harness_core.payloads import ProtoJSON

__all__ = [
    "artifact_to_json",
    "message_from_json",
    "part_from_json",
    "part_to_json",
    "parts_to_json",
]


def part_from_json(part: Mapping[str, Any]) -> Part:
    metadata = cast("Mapping[str, Any]", part.get("metadata") or {})
    name = cast("str | None", part.get("filename"))
    media_type = cast("str | None", part.get("mediaType"))
    if "raw" in part:
        data = base64.b64decode(str(part["raw"]))
        return FilePart(data=data, name=name, media_type=media_type, metadata=metadata)
    if "url" in part:
        return FilePart(url=str(part["url"]), name=name, media_type=media_type, metadata=metadata)
    if "data" in part:
        return DataPart(part["data"], metadata=metadata)
    return TextPart(str(part.get("text", "")), metadata=metadata)


def part_to_json(part: Part) -> ProtoJSON:
    out: ProtoJSON
    if isinstance(part, TextPart):
        out = {"text": part.text}
    elif isinstance(part, DataPart):
        out = {"data": part.data}
    else:
        out = {"raw": base64.b64encode(part.data).decode()} if part.data is not None else {}
        if part.url is not None:
            out["url"] = part.url
        if part.name:
            out["filename"] = part.name
        if part.media_type:
            out["mediaType"] = part.media_type
    if part.metadata:
        out["metadata"] = dict(part.metadata)
    return out


def parts_to_json(parts: tuple[Part, ...]) -> tuple[ProtoJSON, ...]:
    return tuple(part_to_json(p) for p in parts)


def message_from_json(message: Mapping[str, Any], sender: str | None = None) -> TurnMessage:
    raw_parts = cast("list[Mapping[str, Any]]", message.get("parts") or [])
    return TurnMessage(
        message_id=str(message.get("messageId", "")),
        role="agent" if message.get("role") == "ROLE_AGENT" else "user",
        parts=tuple(part_from_json(p) for p in raw_parts),
        metadata=cast("Mapping[str, Any]", message.get("metadata") or {}),
        sender=sender,
    )


def artifact_to_json(artifact: Artifact, artifact_id: str) -> ProtoJSON:
    out: ProtoJSON = {"artifactId": artifact_id, "parts": list(parts_to_json(artifact.parts))}
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    if artifact.metadata:
        out["metadata"] = dict(artifact.metadata)
    return out
