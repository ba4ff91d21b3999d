"""`swarmhub`: run the coordinator, create the first admin, add a dataset, export or sample a checkpoint,
or run the demo."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from launch import model_out
from swarmhub.settings import ServerSettings


def _settings(args: argparse.Namespace) -> ServerSettings:
    # Flags given on the command line win over SWARMHUB_* variables; absent flags leave them be.
    overrides = {
        name: getattr(args, name)
        for name in (
            "host",
            "port",
            "database_url",
            "public_url",
            "tls_cert",
            "tls_key",
            "forwarded_allow_ips",
        )
        if getattr(args, name, None) is not None
    }
    return ServerSettings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    # Imported here so that `swarmhub` works on peer-only installs, which lack the server extra.
    import uvicorn
    from uvicorn.server import STARTUP_FAILURE

    from server.app import CoordinatorServer, create_app

    try:
        settings = _settings(args)
    except ValidationError as exc:
        print(f"error: {'; '.join(e['msg'] for e in exc.errors())}", file=sys.stderr)
        return 2
    print(f"swarmhub: join commands name {settings.join_url()}", flush=True)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )
    server = CoordinatorServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    # As `uvicorn.run` does: a server that never started (its port taken, its app failing) exits 3.
    return 0 if server.started else STARTUP_FAILURE


def _read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Repeat password: ") != password:
        raise SystemExit("passwords differ")
    return password


def _create_admin(args: argparse.Namespace) -> int:
    from server.db import make_engine, make_session_factory, upgrade_database
    from server.schemas import UserCreate
    from server.services.accounts import create_user, get_user_by_name

    try:
        account = UserCreate(username=args.username, password=_read_password(args), role="admin")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"error: {problems}", file=sys.stderr)
        return 2
    settings = _settings(args)
    upgrade_database(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            if get_user_by_name(session, account.username) is not None:
                print(f"error: user {account.username!r} already exists", file=sys.stderr)
                return 1
            create_user(session, username=account.username, password=account.password, role="admin")
            session.commit()
    finally:
        engine.dispose()
    print(f"created admin {account.username!r}")
    return 0


def _dataset_add(args: argparse.Namespace) -> int:
    """Pack a file or directory on this host into the coordinator's dataset store, for `owner`."""
    from pathlib import Path

    from server.datasets import service
    from server.datasets.formats import UnsupportedFile, files_bytes, path_files
    from server.datasets.store import DatasetStore
    from server.db import make_engine, make_session_factory, upgrade_database
    from server.services.accounts import get_user_by_name

    overrides = {"dataset_dir": args.dataset_dir} if args.dataset_dir is not None else {}
    settings = _settings(args).model_copy(update=overrides)
    path = Path(args.path).expanduser()
    upgrade_database(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            owner = get_user_by_name(session, args.owner)
            if owner is None:
                print(f"error: no user {args.owner!r}", file=sys.stderr)
                return 1
            try:
                files = path_files(path)
                manifest = DatasetStore(settings.dataset_dir).pack(files_bytes(files))
            except (UnsupportedFile, ValueError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            row = service.record(
                session, owner, name=args.name or path.name, manifest=manifest, files=len(files)
            )
            session.commit()
            print(
                f"dataset {row.digest}: {row.name!r}, {row.bytes} bytes in {row.shards} shards "
                f"from {row.files} files, owned by {owner.username}"
            )
    finally:
        engine.dispose()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmhub", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the coordinator (API, dashboard, peer channels)")
    serve.add_argument("--host", help="interface to listen on (SWARMHUB_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (SWARMHUB_PORT)")
    serve.add_argument("--database-url", help="SQLAlchemy URL (SWARMHUB_DATABASE_URL)")
    serve.add_argument(
        "--public-url",
        help="URL other machines reach this coordinator at, named in join commands "
        "(SWARMHUB_PUBLIC_URL; default: the address and port it listens on)",
    )
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS/WSS (SWARMHUB_TLS_CERT)")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert (SWARMHUB_TLS_KEY)")
    serve.add_argument(
        "--forwarded-allow-ips",
        help="reverse proxies whose X-Forwarded-* headers are trusted (SWARMHUB_FORWARDED_ALLOW_IPS, "
        "default 127.0.0.1)",
    )
    serve.set_defaults(handler=_serve)

    admin = commands.add_parser("create-admin", help="create an admin account")
    admin.add_argument("--username", required=True)
    source = admin.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (visible to other local users; prefer stdin)")
    source.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    admin.add_argument("--database-url", help="SQLAlchemy URL (SWARMHUB_DATABASE_URL)")
    admin.set_defaults(handler=_create_admin)

    dataset = commands.add_parser("dataset", help="manage the coordinator's datasets")
    dataset_commands = dataset.add_subparsers(dest="dataset_command", required=True, metavar="ACTION")
    add = dataset_commands.add_parser(
        "add", help="pack a text/JSONL file or a directory of them (no upload size limit)"
    )
    add.add_argument("path", help="a .txt/.md/.jsonl/... file, or a directory of them")
    add.add_argument("--owner", required=True, help="the user who may train runs on it")
    add.add_argument("--name", default="", help="shown on the dashboard (default: the file's name)")
    add.add_argument("--database-url", help="SQLAlchemy URL (SWARMHUB_DATABASE_URL)")
    add.add_argument("--dataset-dir", help="the coordinator's dataset store (SWARMHUB_DATASET_DIR)")
    add.set_defaults(handler=_dataset_add)

    model_out.add_parsers(commands)

    commands.add_parser("demo", help="start a coordinator and local peers (`swarmhub demo --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # The demo parses its own options; everything after `demo` goes to it untouched.
    if args_list[:1] == ["demo"]:
        from launch.demo import main as demo_main

        return demo_main(args_list[1:])
    args = _parser().parse_args(args_list)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
