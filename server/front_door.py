"""What every HTTP request passes first: a body size limit, strict JSON, security headers, and
validation errors that never echo a large or non-finite input back.

Python's `json` reads `NaN`, `Infinity` and `1e400` (which overflows to inf) although JSON has no
such values; they then reached the models and, inside a 422, a response encoder that refuses them
(a 500). Bodies are checked here against standard JSON, so no route ever sees one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STREAMING_UPLOADS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("PUT", re.compile(r"^/api/runs/\d+/checkpoints/\d+/stages/\d+$")),
    ("POST", re.compile(r"^/api/datasets$")),
    ("POST", re.compile(r"^/api/datasets/drafts/[0-9a-f]{32}/files$")),
)
"""Routes that stream their body to disk and enforce their own (larger) limit."""

MAX_ECHOED_CHARS = 200
"""How much of a rejected input a 422 repeats: enough to recognise it, never megabytes."""

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
# FastAPI's /docs and /redoc load their scripts and styles from a CDN and start them inline.
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
    "font-src https://fonts.gstatic.com; img-src 'self' data: https://fastapi.tiangolo.com; "
    "worker-src blob:; frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value: send a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"{text[:40]} is out of range for a number")
    return value


def strict_json_problem(body: bytes) -> str | None:
    """Why `body` is not standard JSON with finite numbers, or None when it is."""
    try:
        json.loads(body, parse_constant=_reject_constant, parse_float=_finite)
    except _NotJson as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return None  # plain syntax errors get FastAPI's own json_invalid answer
    return None


def _json_response(status_code: int, detail: object) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyLimitMiddleware:
    """Refuse bodies over `limit` bytes (413) before any route reads them, and non-standard JSON (422).

    The body of every other request is read here (it is small by construction) and replayed to the
    app, so no route can be made to buffer more than `limit`.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._streams(scope):
            await self.app(scope, receive, send)
            return
        too_large = _json_response(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"request body exceeds this coordinator's limit of {self.limit} bytes",
        )
        # Closing the connection spares the server reading (and discarding) the rest of the body.
        too_large.headers["Connection"] = "close"
        declared = _declared_length(scope)
        if declared is not None and declared > self.limit:
            await too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(scope) and (problem := strict_json_problem(body)) is not None:
            await _json_response(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                [{"type": "json_invalid", "loc": ["body"], "msg": problem, "input": None}],
            )(scope, receive, send)
            return
        await self.app(
            scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send
        )

    @staticmethod
    def _streams(scope: Scope) -> bool:
        return any(scope["method"] == m and pattern.match(scope["path"]) for m, pattern in STREAMING_UPLOADS)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


class SecurityHeadersMiddleware:
    """Frame denial, no-sniff, a referrer policy and a content-security policy on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = DOCS_CONTENT_SECURITY_POLICY if scope["path"] in DOCS_PATHS else CONTENT_SECURITY_POLICY

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                if b"content-security-policy" not in present:
                    extra.append((b"content-security-policy", policy.encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def _clip(value: Any) -> Any:
    """A short, JSON-safe stand-in for a rejected input."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | bytes):
        return value[:MAX_ECHOED_CHARS] + ("…" if len(value) > MAX_ECHOED_CHARS else "")
    if isinstance(value, dict | list | tuple):
        text = json.dumps(jsonable_encoder(value), default=str)
        if len(text) > MAX_ECHOED_CHARS or "NaN" in text or "Infinity" in text:
            return text[:MAX_ECHOED_CHARS] + ("…" if len(text) > MAX_ECHOED_CHARS else "")
    return value


def _clipped(errors: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for error in errors:
        error = dict(error)
        if "input" in error:
            error["input"] = _clip(error["input"])
        out.append(error)
    return out


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _json_response(status.HTTP_422_UNPROCESSABLE_CONTENT, jsonable_encoder(_clipped(exc.errors())))


def install_front_door(app: FastAPI, *, max_body_bytes: int) -> None:
    """Add the middlewares (outermost) and the 422 handler; call after every other middleware."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(BodyLimitMiddleware, limit=max_body_bytes)
    app.add_middleware(SecurityHeadersMiddleware)
