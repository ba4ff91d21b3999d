"""`swarmhub`: run the coordinator, create the first admin, or run the demo."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from swarmhub.settings import ServerSettings


def _settings(args: argparse.Namespace) -> ServerSettings:
    # Flags given on the command line win over SWARMHUB_* variables; absent flags leave them be.
    overrides = {
        name: getattr(args, name)
        for name in ("host", "port", "database_url")
        if getattr(args, name, None) is not None
    }
    return ServerSettings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    # Imported here so that `swarmhub` works on peer-only installs, which lack the server extra.
    import uvicorn

    from server.app import create_app

    settings = _settings(args)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
    return 0


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmhub", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the coordinator (API, dashboard, peer channels)")
    serve.add_argument("--host", help="interface to listen on (SWARMHUB_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (SWARMHUB_PORT)")
    serve.add_argument("--database-url", help="SQLAlchemy URL (SWARMHUB_DATABASE_URL)")
    serve.set_defaults(handler=_serve)

    admin = commands.add_parser("create-admin", help="create an admin account")
    admin.add_argument("--username", required=True)
    source = admin.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (visible to other local users; prefer stdin)")
    source.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    admin.add_argument("--database-url", help="SQLAlchemy URL (SWARMHUB_DATABASE_URL)")
    admin.set_defaults(handler=_create_admin)

    commands.add_parser("demo", help="start a coordinator and local peers (`swarmhub demo --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # The demo parses its own options; everything after `demo` goes to it untouched.
    if args_list[:1] == ["demo"]:
        from swarmhub.demo import main as demo_main

        return demo_main(args_list[1:])
    args = _parser().parse_args(args_list)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
