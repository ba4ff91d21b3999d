"""All settings in one place: environment variables prefixed SWARMHUB_, overridable by CLI flags."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal, Self

from pydantic import ByteSize, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    """The coordinator's settings (`swarmhub serve`)."""

    model_config = SettingsConfigDict(env_prefix="SWARMHUB_", extra="ignore")

    database_url: str = "sqlite:///var/swarmhub.sqlite"
    """SQLAlchemy URL. SQLite is the embedded default; use postgresql+psycopg://... in production."""
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str = Field(default="", pattern=r"^(https?://[^/\s]+/?)?$")
    """The URL participants on other machines reach the coordinator at (a public name, a reverse
    proxy's https URL); join commands name it. Empty: the URL this coordinator listens on."""
    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    """A peer whose heartbeats stop for this long is marked lost."""
    heartbeat_interval_s: float = Field(default=1.0, gt=0, le=60)
    """How often peers send a heartbeat (they are told so when they connect). Each is a message the
    coordinator handles: thousands of peers call for a longer interval (docs/operations.md)."""
    checkpoint_dir: Path = Path("var/checkpoints")
    """Where stage checkpoints uploaded by peers are stored."""
    dataset_dir: Path = Path("var/datasets")
    """Where datasets are kept as content-addressed shards (shards/<sha256>, manifests/<id>.json)."""
    dataset_upload_max_bytes: int = Field(default=1024**3, ge=1)
    """The largest file an owner may upload through the API; `swarmhub dataset add` has no limit."""
    dataset_draft_max_files: int = Field(default=1000, ge=1)
    """How many files an owner may add to one dataset draft (`POST /api/datasets/drafts`)."""
    dataset_draft_max_bytes: int = Field(default=4 * 1024**3, ge=1)
    """The most bytes the files of one dataset draft may add up to."""
    dataset_drafts_per_owner: int = Field(default=4, ge=1)
    """How many unsealed drafts one owner may hold at a time."""
    dataset_draft_ttl_s: float = Field(default=24 * 3600.0, gt=0)
    """A draft no file was added to for this long is abandoned: its files are deleted."""
    checkpoint_every_steps: int = Field(default=20, ge=1)
    """A stage checkpoint is taken every this many steps (and on request, and when a run finishes)."""
    checkpoint_keep: int = Field(default=3, ge=1)
    """How many of a run's newest complete checkpoint steps to keep; older steps' files are deleted."""
    frontend_dir: Path | None = None
    """Built dashboard (frontend/dist); served at / when present."""
    peer_package_dir: Path = Path("var/peer-package")
    """Where the peer package participants install (a wheel of this coordinator's own code, built on
    first download; `server/peer_package.py`) is kept."""
    peer_package_source: Path | None = None
    """The SwarmHub source tree (with pyproject.toml) the peer package is built from; default: the
    checkout this coordinator runs from, else the current directory if it holds one."""
    cookie_secure: bool = False
    """Mark session cookies Secure; turn on behind a reverse proxy that serves HTTPS (always on when
    the coordinator serves TLS itself)."""
    tls_cert: Path | None = None
    """PEM certificate (chain): serve HTTPS and WSS with it. Needs `tls_key`."""
    tls_key: Path | None = None
    """PEM private key of `tls_cert`."""
    forwarded_allow_ips: str = "127.0.0.1"
    """Comma-separated addresses of reverse proxies whose X-Forwarded-For/-Proto headers are trusted
    (uvicorn's option); '*' trusts any, only for a coordinator no one else can reach directly."""
    session_days: int = Field(default=14, gt=0)
    session_idle_minutes: float = Field(default=720.0, gt=0)
    """A session unused for this long ends (expired sessions are purged periodically)."""
    invitation_hours: float = Field(default=72.0, gt=0)
    """How long an invitation or password-reset link an admin issues stays usable (once)."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest request body the API reads; checkpoint and dataset uploads stream and have their own limits."""
    password_hash_concurrency: int = Field(default=2, ge=1)
    """How many argon2 hashes run at once (each takes `security.ARGON2_MEMORY_KIB` of memory)."""
    checkpoint_quota_bytes: int = Field(default=64 * 1024**3, ge=0)
    """Disk space one run's checkpoints may take; an upload past it is refused. 0: no quota."""
    averaging_deadline_s: float = Field(default=60.0, gt=0)
    """The least time a stage's gradient averaging gets before it goes on without the peers holding it up
    (more for big stages: twice what a peer allows itself to push its gradients)."""
    butterfly_from_members: int = Field(default=9, ge=2, le=4097)
    """A stage's round with at least this many members averages in a butterfly (each member sends and
    takes two sums' worth, whatever the size) instead of all-to-all (K-1 sums each way, but every
    member adds every contribution itself and reports its norm, the stronger check on strangers)."""
    all_to_all_most_extra_s: float = Field(default=1.0, ge=0.0)
    """A smaller round (from 3 members) goes in a butterfly too where all-to-all at its slowest
    member's measured upload would take this many seconds longer; `inf`: never."""
    fault_point: str = Field(default="", pattern=r"^((averaged|recorded|applying|opened)@\d+)?$")
    """Testing aid, never for production: `POINT@STEP` makes the coordinator exit abruptly at that phase
    boundary of that step (averaged: before the step is written; recorded: written, no update sent;
    applying: updates sent; opened: the next step opened), as a killed coordinator would."""

    webhook_timeout_s: float = Field(default=10.0, gt=0)
    """How long one webhook delivery attempt may take (connect, send, answer) before it counts as failed."""
    webhook_max_attempts: int = Field(default=8, ge=1)
    """Attempts per delivery before it is given up (marked failed in the delivery log)."""
    webhook_backoff_base_s: float = Field(default=10.0, gt=0)
    """The wait after a first failed attempt; it doubles after each further failure, up to the cap."""
    webhook_backoff_cap_s: float = Field(default=3600.0, gt=0)
    """The longest wait between two attempts of one delivery."""
    webhook_concurrency: int = Field(default=8, ge=1)
    """How many webhook deliveries are in flight at once (a slow receiver holds only its own)."""

    def join_url(self) -> str:
        """The coordinator URL a join command names: `public_url`, else where it listens (with this
        machine's host name in place of a wildcard address, which no other machine can dial)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        scheme = "https" if self.tls_cert is not None else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    @model_validator(mode="after")
    def _tls_pair(self) -> Self:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give both tls_cert and tls_key (--tls-cert, --tls-key), or neither")
        return self

    @model_validator(mode="after")
    def _heartbeats_fit_the_timeout(self) -> Self:
        # One late or lost heartbeat must not get a live peer marked lost.
        if self.heartbeat_timeout_s < 3 * self.heartbeat_interval_s:
            raise ValueError(
                f"heartbeat_timeout_s ({self.heartbeat_timeout_s:g}) must be at least three heartbeat"
                f" intervals (3 x {self.heartbeat_interval_s:g} s)"
            )
        return self

    @property
    def secure_cookies(self) -> bool:
        """Cookies are Secure whenever browsers reach the coordinator over HTTPS: its own TLS, or a
        reverse proxy's https public URL (a request seen as https also gets them, see server.auth)."""
        return self.cookie_secure or self.tls_cert is not None or self.public_url.startswith("https://")


class PeerSettings(BaseSettings):
    """A peer's settings (`swarmhub-peer join`)."""

    model_config = SettingsConfigDict(env_prefix="SWARMHUB_PEER_", extra="ignore")

    device: Literal["cpu", "cuda"] = "cpu"
    stage: str = "auto"
    """'auto' lets the coordinator choose; a number asks for that stage."""
    listen_host: str = "0.0.0.0"
    """Address the data-plane server binds to (every interface by default)."""
    listen_port: int = 0
    """0 picks a free port."""
    announce: str = ""
    """host[:port] other peers should dial (a port forward, a container's service name). Empty: the
    address the coordinator sees this peer connect from, with the port bound."""
    threads: int = Field(default=1, ge=1)
    """torch intra-op threads; several peers often share one machine."""
    slowdown: float = Field(default=1.0, ge=1.0)
    """Stretch every stage call's compute by this factor, to emulate a slower device (the bookkeeping
    around it, averaging sums, hashes and state copies, runs at this machine's speed)."""
    activation_cache_mb: float = Field(default=1024.0, ge=0)
    """Memory for forwards kept until their backward arrives (oldest evicted first): a backward
    served from it needs neither the input again nor a recomputed forward. 0 turns keeping off.
    A stage of the `small` preset keeps ~76 MB per microbatch of 4 x 256 tokens, and the trainers
    keep several microbatches in flight per serving peer (`peer/concurrency.py`)."""
    upload_mbps: float | None = Field(default=None, gt=0)
    """Cap this peer's outgoing data-plane bandwidth, to emulate a slow link."""
    call_timeout_s: float = Field(default=60.0, gt=0)
    """How long a trainer waits for one stage call before retrying on another peer."""
    trainer: bool = True
    """Also drive microbatches through the pipeline (not only serve a stage)."""
    coordinator_ca: Path | None = None
    """PEM certificate(s) to trust for an https coordinator instead of the system's store (a
    self-signed deployment)."""
    data_dir: Path | None = None
    """Where downloaded dataset shards are kept (shards/<sha256>); may hold a copy of the
    coordinator's shards, each checked against its hash before use. Default: the user's cache."""
    data_plane_tls: bool = False
    """Serve the data plane over TLS with a key pair generated at start (others pin its fingerprint).
    Always on when the coordinator URL is https."""
    fault: str = Field(default="", max_length=64)
    """A testing aid, never for real runs: make this peer faulty on purpose ('noise:0.05', 'scale:50',
    'stale'; `peer/faults.py`) to see the swarm catch it. Empty: an honest peer."""
    max_memory: ByteSize | None = None
    """The most memory this peer may use for a run ('16GiB', '512MB', bytes); a run whose estimate is
    larger is refused before anything is allocated. None: the device's free memory when joining."""
