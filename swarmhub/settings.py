"""All settings in one place: environment variables prefixed SWARMHUB_, overridable by CLI flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    """The coordinator's settings (`swarmhub serve`)."""

    model_config = SettingsConfigDict(env_prefix="SWARMHUB_", extra="ignore")

    database_url: str = "sqlite:///var/swarmhub.sqlite"
    """SQLAlchemy URL. SQLite is the embedded default; use postgresql+psycopg://... in production."""
    host: str = "127.0.0.1"
    port: int = 8000
    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    """A peer whose heartbeats stop for this long is marked lost."""
    checkpoint_dir: Path = Path("var/checkpoints")
    """Where stage checkpoints uploaded by peers are stored."""
    checkpoint_every_steps: int = Field(default=20, ge=1)
    """A stage checkpoint is taken every this many steps (and on request, and when a run finishes)."""
    checkpoint_keep: int = Field(default=3, ge=1)
    """How many of a run's newest complete checkpoint steps to keep; older steps' files are deleted."""
    frontend_dir: Path | None = None
    """Built dashboard (frontend/dist); served at / when present."""
    cookie_secure: bool = False
    """Mark session cookies Secure; turn on behind HTTPS."""
    session_days: int = Field(default=14, gt=0)


class PeerSettings(BaseSettings):
    """A peer's settings (`swarmhub-peer join`)."""

    model_config = SettingsConfigDict(env_prefix="SWARMHUB_PEER_", extra="ignore")

    device: Literal["cpu", "cuda"] = "cpu"
    stage: str = "auto"
    """'auto' lets the coordinator choose; a number asks for that stage."""
    listen_host: str = "127.0.0.1"
    """Address the data-plane server binds to and registers with the coordinator."""
    listen_port: int = 0
    """0 picks a free port."""
    threads: int = Field(default=1, ge=1)
    """torch intra-op threads; several peers often share one machine."""
    slowdown: float = Field(default=1.0, ge=1.0)
    """Stretch every compute call by this factor, to emulate a slower device."""
    upload_mbps: float | None = Field(default=None, gt=0)
    """Cap this peer's outgoing data-plane bandwidth, to emulate a slow link."""
    call_timeout_s: float = Field(default=60.0, gt=0)
    """How long a trainer waits for one stage call before retrying on another peer."""
    trainer: bool = True
    """Also drive microbatches through the pipeline (not only serve a stage)."""
