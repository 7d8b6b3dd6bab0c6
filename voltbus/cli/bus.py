"""``voltbus nats``: the embedded bus, and ``voltbus nats auth init``: its per-role users and permissions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

nats_app = typer.Typer(
    help="Run the embedded NATS JetStream bus in the foreground (Ctrl-C stops it).", invoke_without_command=True
)
auth_app = typer.Typer(help="Bus users and permissions, one user per voltbus role.", no_args_is_help=True)
nats_app.add_typer(auth_app, name="auth")


@nats_app.callback()
def nats(
    ctx: typer.Context,
    data_dir: Annotated[Path | None, typer.Option(help="JetStream store [env: VOLTBUS_BUS__DATA_DIR]")] = None,
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (default 127.0.0.1; any other needs --auth)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Client port (default 4222)")] = None,
    monitor_port: Annotated[
        int | None, typer.Option(help="Monitoring port on 127.0.0.1, no login (default 0: off)")
    ] = None,
    auth: Annotated[
        Path | None,
        typer.Option(help="require the users of this `nats auth init` directory [env: VOLTBUS_BUS__AUTH_DIR]"),
    ] = None,  # noqa: E501
    tls_cert: Annotated[
        Path | None, typer.Option(help="serve TLS with this certificate [env: VOLTBUS_BUS__TLS_CERT]")
    ] = None,  # noqa: E501
    tls_key: Annotated[Path | None, typer.Option(help="private key of --tls-cert [env: VOLTBUS_BUS__TLS_KEY]")] = None,  # noqa: E501
) -> None:
    """Run the embedded NATS JetStream bus in the foreground (Ctrl-C stops it)."""
    if ctx.invoked_subcommand is not None:
        return
    from voltbus.services.ops.natsserver import serve_forever

    from .common import say, settings_for

    settings = settings_for()
    updates = {"data_dir": data_dir, "host": host, "port": port, "monitor_port": monitor_port, "auth_dir": auth}
    updates |= {"tls_cert": tls_cert, "tls_key": tls_key}
    settings.bus = settings.bus.model_copy(update={k: v for k, v in updates.items() if v is not None})
    raise typer.Exit(serve_forever(settings, say, warn=lambda line: typer.echo(f"voltbus: warning: {line}", err=True)))


@auth_app.command("init")
def auth_init(
    out: Annotated[Path, typer.Option(help="directory for auth.conf and one <role>.env per role")],
    namespace: Annotated[
        str | None, typer.Option(help="the deployment's namespace [env: VOLTBUS_NATS__NAMESPACE]")
    ] = None,  # noqa: E501
    force: Annotated[bool, typer.Option(help="replace existing credentials (new passwords and keys)")] = False,
    keep_existing: Annotated[
        bool, typer.Option(help="create only what is missing, keep every existing password and key (up, compose)")
    ] = False,
    rounds: Annotated[int, typer.Option(help="bcrypt cost; the server pays it once per connection")] = 11,
    role_dir: Annotated[
        list[str] | None,
        typer.Option(help="ROLE=DIR: also keep ROLE's env file (alone) in DIR, for a container that mounts only it"),
    ] = None,
) -> None:
    """Generate a deployment's credentials: a bus user per role, the gateway's keys and the SQL token.

    Writes the server's include (bcrypt hashes and permissions) and one env file per role holding its
    password and the secrets it uses: the gateway key secret, the gateway admin key, the SQL token."""
    from voltbus.schemas.subjects import Topology
    from voltbus.services.ops.credentials import copy_roles, ensure_credentials
    from voltbus.services.ops.natsauth import ROLES, AuthError, init_auth

    from .common import say, settings_for

    exists = (out / "auth.conf").exists()
    if exists and not (force or keep_existing):
        raise AuthError(
            f"{out / 'auth.conf'} exists; pass --keep-existing to add what is missing, "
            "or --force to replace every role's password and key"
        )
    topo = Topology(namespace=namespace or settings_for().nats.namespace)
    if force:
        init_auth(out, topo, rounds=rounds)
    made = ensure_credentials(out, topo, rounds=rounds)
    copy_roles(out, role_dir or [])
    if keep_existing:
        say(f"{out}: created {', '.join(made)}" if made else f"{out}: every credential exists; nothing changed")
        return
    say(f"wrote {out / 'auth.conf'} (namespace {topo.namespace!r}) and {len(ROLES)} env files: {', '.join(ROLES)}")
    say(f"run the bus with `voltbus nats --auth {out}`; give each service its role's env file")
