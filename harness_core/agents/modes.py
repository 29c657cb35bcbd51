"""Which media types an agent accepts and produces: its card's input and output modes, and the check
that refuses a message part the agent does not accept (A2A ``ContentTypeNotSupportedError``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

__all__ = ["LLM_INPUT_MODES", "TEXT_MODES", "media_type_of", "refused_media_types"]

TEXT_MODES = ("text/plain",)
#: What the built-in LLM agent passes to a model (docs/agents.md, "Models from configuration").
LLM_INPUT_MODES = (
    "text/plain",
    "text/*",
    "application/json",
    "application/pdf",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
)


def media_type_of(part: Mapping[str, Any]) -> str:
    """A ProtoJSON part's media type: text is text/plain, data application/json, a file its own."""
    if "data" in part:
        return "application/json"
    declared = str(part.get("mediaType") or "").lower()
    if "raw" in part or "url" in part:
        return declared or "application/octet-stream"
    return declared or "text/plain"


def _accepts(modes: Iterable[str], media_type: str) -> bool:
    kind = media_type.split("/", 1)[0]
    return any(mode in ("*/*", media_type) or mode == f"{kind}/*" for mode in modes)


def refused_media_types(message: Mapping[str, Any], modes: Iterable[str]) -> list[str]:
    """The media types of ``message``'s parts that ``modes`` do not accept (in order, once each)."""
    accepted = tuple(modes)
    refused: list[str] = []
    for part in cast("list[Mapping[str, Any]]", message.get("parts") or []):
        media_type = media_type_of(part)
        if not _accepts(accepted, media_type) and media_type not in refused:
            refused.append(media_type)
    return refused
