"""The Temporal payload converter: attrs classes to JSON and back through one cattrs converter.

One converter for the Temporal boundary (STYLE.md §3). It is passed through the workflow sandbox along
with ``payloads`` so cattrs sees each payload class once (``shared/reference/temporal-latency.md``).
"""

from __future__ import annotations

import json
from typing import Any, cast

import cattrs
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    EncodingPayloadConverter,
)

__all__ = ["data_converter", "payload_converter"]

payload_converter = cattrs.Converter()


class _AttrsJSONPayloadConverter(EncodingPayloadConverter):
    """``json/plain`` payloads from attrs classes, tuples, dicts and scalars."""

    @property
    def encoding(self) -> str:
        return "json/plain"

    def to_payload(self, value: Any) -> Payload | None:
        data = json.dumps(
            payload_converter.unstructure(value), separators=(",", ":"), ensure_ascii=False
        )
        return Payload(metadata={"encoding": self.encoding.encode()}, data=data.encode())

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raw: Any = json.loads(payload.data)
        if type_hint is None or type_hint is Any:
            return raw
        target = cast("type[object]", type_hint)
        return payload_converter.structure(raw, target)


class _HarnessPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        super().__init__(
            BinaryNullPayloadConverter(),
            BinaryPlainPayloadConverter(),
            _AttrsJSONPayloadConverter(),
        )


data_converter = DataConverter(payload_converter_class=_HarnessPayloadConverter)
