"""What a `kbert serve` request carries: its JSON body read within the limits, and each field
checked, a bad one refused in one line (`HTTPError` 400, or 413 over a limit)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from kbert.server.state import HTTPError, Limits


async def read_json(request: Any, limits: Limits) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_body:
        raise HTTPError(413, f"the request is {int(length)} bytes; at most {limits.max_body} "
                             "(--max-request-bytes)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limits.max_body:
            raise HTTPError(413, f"the request is over {limits.max_body} bytes "
                                 "(--max-request-bytes)")
    if not body:
        raise HTTPError(400, "the request has no body; send a JSON object")
    try:
        import orjson
        return orjson.loads(bytes(body))
    except Exception:        # noqa: BLE001  (orjson refuses NaN/Infinity, which TF Serving takes)
        try:
            return json.loads(bytes(body))
        except (ValueError, UnicodeDecodeError) as e:
            raise HTTPError(400, f"the body is not valid JSON: {e}") from None


def json_object(body: Any, allowed: set[str], required: Sequence[str] = ()) -> dict:
    if not isinstance(body, dict):
        raise HTTPError(400, "the body must be a JSON object")
    unknown = set(body) - allowed
    if unknown:
        raise HTTPError(400, f"unknown field(s): {', '.join(sorted(unknown))} (this route takes "
                             f"{', '.join(sorted(allowed))})")
    for name in required:
        if name not in body:
            raise HTTPError(400, f"the body needs \"{name}\"")
    return body


def texts_field(body: dict, name: str, limits: Limits,
                what: str = "text") -> tuple[list[str], bool]:
    """A field that is a text or a list of texts → (list, whether one text was given)."""
    from kbert.tokenizer import check_texts
    value = body[name]
    try:
        texts, single = check_texts(name, value, what)
    except ValueError as e:
        raise HTTPError(400, str(e)) from None
    if len(texts) > limits.max_inputs:
        raise HTTPError(413, f"\"{name}\" has {len(texts)} texts; at most {limits.max_inputs} "
                             "a request (--max-inputs)")
    return texts, single


def option(body: dict, name: str, kind: type | tuple, default: Any,
            check: Callable[[Any], bool] = lambda v: True, want: str = "") -> Any:
    value = body.get(name, default)
    if value is None and default is None:
        return None
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind) \
            or not check(value):
        raise HTTPError(400, f"\"{name}\" must be {want or getattr(kind, '__name__', kind)}, "
                             f"got {json.dumps(value)[:60]}")
    return value


def positive(body: dict, name: str, default: int | None) -> Any:
    return option(body, name, int, default, lambda v: v >= 1, "an integer >= 1")


__all__ = ["json_object", "option", "positive", "read_json", "texts_field"]
