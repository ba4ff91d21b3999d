"""Errors services raise for the API to turn into 4xx JSON responses."""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError


class ServiceError(Exception):
    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(ServiceError):
    status_code = status.HTTP_404_NOT_FOUND


class Conflict(ServiceError):
    status_code = status.HTTP_409_CONFLICT


class Unprocessable(ServiceError):
    status_code = status.HTTP_422_UNPROCESSABLE_CONTENT


class Forbidden(ServiceError):
    status_code = status.HTTP_403_FORBIDDEN


class Unauthorized(ServiceError):
    status_code = status.HTTP_401_UNAUTHORIZED


async def _service_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)


async def _integrity_error(_request: Request, _exc: Exception) -> JSONResponse:
    # A unique or foreign-key constraint caught a race or a duplicate the service did not check.
    return JSONResponse(
        {"detail": "conflicts with existing data (duplicate or dangling reference)"},
        status_code=status.HTTP_409_CONFLICT,
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(IntegrityError, _integrity_error)
