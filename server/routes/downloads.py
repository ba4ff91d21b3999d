"""The peer package for participants' machines: what to run to install it, and the wheel itself.
Public, like the presets: it is the coordinator's own code, and a fresh machine has no session."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel

from server.deps import SettingsDep
from server.errors import NotFound
from server.peer_package import PackageUnavailable, PeerPackage, install_command
from server.schemas import ErrorOut

router = APIRouter(tags=["downloads"])

WHEEL_MEDIA_TYPE = "application/zip"


class PeerPackageOut(BaseModel):
    available: bool
    detail: str
    """Why it is not available (empty when it is)."""
    version: str
    url: str
    """Where pip downloads the wheel: this coordinator's join URL (its public_url)."""
    install_command: str
    """The line a fresh machine runs before the join command (Python 3.11+ and pip needed)."""


def _package(request: Request) -> PeerPackage:
    package: PeerPackage = request.app.state.peer_package
    return package


@router.get("/api/peer-package")
def peer_package(request: Request, settings: SettingsDep) -> PeerPackageOut:
    """How participants install the peer; the wheel is built on its first download."""
    try:
        info = _package(request).info()
    except PackageUnavailable as exc:
        return PeerPackageOut(available=False, detail=str(exc), version="", url="", install_command="")
    url = f"{settings.join_url()}/downloads/{info.filename}"
    return PeerPackageOut(
        available=True, detail="", version=info.version, url=url, install_command=install_command(url)
    )


@router.get("/downloads/{filename}", responses={404: {"model": ErrorOut}}, response_class=FileResponse)
async def download_wheel(request: Request, filename: str) -> FileResponse:
    """The peer package's wheel (built on the first request, which takes a few seconds)."""
    package = _package(request)
    try:
        info = package.info()
        if filename != info.filename:
            raise NotFound(f"no such download; the peer package is {info.filename}")
        wheel = await to_thread.run_sync(package.wheel)
    except PackageUnavailable as exc:
        raise NotFound(str(exc)) from None
    # pip caches by URL: a coordinator restarted on changed code must not hand out the old wheel.
    headers = {"Cache-Control": "no-cache"}
    return FileResponse(wheel, media_type=WHEEL_MEDIA_TYPE, filename=filename, headers=headers)
