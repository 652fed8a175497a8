"""`offload serve`: run the daemon; `offload serve keys` makes CURVE key pairs; `offload serve
stats|reload|set` talk to its control socket (docs/serve-protocol.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import zmq
from zmq.utils.monitor import recv_monitor_message

from offload.clitools import err
from offload.clitools import fail as _fail
from offload.serve import CurveKeys

app = typer.Typer(
    help="Serve a rule set over ZeroMQ (protocol and security: docs/serve-protocol.md). Without a "
    "subcommand: start the daemon. Every endpoint binds loopback or IPC unless you say otherwise; "
    "a control endpoint on the network needs CURVE keys (offload serve keys).",
    invoke_without_command=True,
)
ControlOpt = Annotated[
    str, typer.Option("--control", "-c", help="The daemon's control endpoint, e.g. ipc:///tmp/o-ctl.sock.")
]
ServerKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--server-key",
        envvar="OFFLOAD_SERVER_KEY",
        help="The daemon's public key file (server.key), for a socket that requires CURVE. "
        "\\[default: none: no CURVE]",
    ),
]
ClientKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--client-key",
        envvar="OFFLOAD_CLIENT_KEY",
        help="Your secret key file (NAME.key_secret), whose public half the daemon admits. \\[default: none]",
    ),
]
NONE = "\\[default: none]"


@app.callback()
def serve(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Settings file (TOML; keys as the options below with _, e.g. `workers = 2`). "
            f"Options given here override it. {NONE}",
        ),
    ] = None,
    ruletype: Annotated[
        str | None, typer.Option("--ruletype", help=f"Rule type: .xml or .toml (or in --config). {NONE}")
    ] = None,
    rules: Annotated[str | None, typer.Option("--rules", help=f"Rules CSV (or in --config). {NONE}")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            "-e",
            help="Data endpoint to bind (repeat): tcp://127.0.0.1:5555, ipc:///tmp/x. An address off "
            "loopback needs --curve-data-client or --allow-remote-data. \\[default: tcp://127.0.0.1:5555]",
        ),
    ] = None,
    control: Annotated[
        str | None,
        typer.Option(
            "--control",
            "-c",
            help="Control endpoint for `stats`, `reload` and `set`; off loopback/IPC it needs CURVE "
            f"(--curve-secret-key, --curve-client). {NONE}",
        ),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker threads (w): decode, batch, encode. \\[default: 2]")
    ] = None,
    kernels: Annotated[
        int | None,
        typer.Option(help="Kernel executors (k), each matching one batch at a time. \\[default: 1]"),
    ] = None,
    engine_threads: Annotated[
        int | None, typer.Option(help="Matching threads per kernel executor (e). \\[default: 1]")
    ] = None,
    queue: Annotated[
        int | None,
        typer.Option(help="Requests that may wait; beyond that the reply is 'busy'. \\[default: 64]"),
    ] = None,
    matcher: Annotated[
        str | None,
        typer.Option(
            help="linear, nfa, nfa:<given|asc|desc|h2>, fast, gpu-host (the GPU's algorithm on the "
            "CPU) or gpu (the kernel executors run on the CUDA device). \\[default: fast]"
        ),
    ] = None,
    batch_max_queries: Annotated[
        int | None,
        typer.Option(
            help="Cross-request batching: queries per batch (0 = one request at a time). \\[default: 0]"
        ),
    ] = None,
    batch_timeout_us: Annotated[
        int | None,
        typer.Option(
            help="Cross-request batching: wait for more, from the first request's arrival. \\[default: 200]"
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Serve Prometheus text at http://ADDR/metrics: PORT (on 127.0.0.1) or HOST:PORT; off "
            f"loopback it needs --allow-remote-metrics. {NONE}"
        ),
    ] = None,
    curve_secret_key: Annotated[
        str | None,
        typer.Option(
            help="The daemon's key pair (server.key_secret from `offload serve keys`): the control "
            f"socket then requires CURVE. {NONE}"
        ),
    ] = None,
    curve_client: Annotated[
        list[str] | None,
        typer.Option(
            help="A client public key file (NAME.key) or a directory of them, admitted on the control "
            f"socket (repeat). {NONE}"
        ),
    ] = None,
    curve_data_client: Annotated[
        list[str] | None,
        typer.Option(
            help="The same for the data endpoints: given, they require CURVE too (repeat). "
            "\\[default: none: data endpoints without CURVE]"
        ),
    ] = None,
    reload_dir: Annotated[
        list[str] | None,
        typer.Option(
            help="A directory `reload` may read rule files from (repeat); other paths are refused. "
            "\\[default: the directories of --ruletype and --rules]"
        ),
    ] = None,
    allow_remote_data: Annotated[
        bool,
        typer.Option(
            "--allow-remote-data",
            help="Allow a data endpoint off loopback without CURVE (clear text, open to anyone who can "
            "reach it). \\[default: refused]",
            show_default=False,
        ),
    ] = False,
    allow_remote_metrics: Annotated[
        bool,
        typer.Option(
            "--allow-remote-metrics",
            help="Allow the metrics page off loopback (counters only). \\[default: refused]",
            show_default=False,
        ),
    ] = False,
) -> None:
    """Start the daemon until Ctrl-C or SIGTERM (queued requests are answered first)."""
    if ctx.invoked_subcommand is not None:
        return
    from offload import _native

    try:
        counters = _native.serve(
            config=config,
            ruletype=ruletype,
            rules=rules,
            endpoints=endpoint,
            workers=workers,
            kernels=kernels,
            engine_threads=engine_threads,
            queue=queue,
            matcher=matcher,
            control=control,
            batch_max_queries=batch_max_queries,
            batch_timeout_us=batch_timeout_us,
            metrics=metrics,
            curve_secret_key=curve_secret_key,
            curve_clients=curve_client,
            curve_data_clients=curve_data_client,
            reload_dirs=reload_dir,
            # an unset flag leaves the settings file's value
            allow_remote_data=True if allow_remote_data else None,
            allow_remote_metrics=True if allow_remote_metrics else None,
        )
    except (ValueError, OverflowError) as e:
        raise _fail(str(e)) from None
    err.print("stopped: " + ", ".join(f"{k} {v}" for k, v in counters), highlight=False)


@app.command()
def keys(
    directory: Annotated[Path, typer.Argument(help="Where to write the key files (created if missing).")],
    name: Annotated[
        list[str] | None,
        typer.Option(help="A key pair to make (repeat). \\[default: server, client]"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing key files.")] = False,
) -> None:
    """Make CURVE key pairs: NAME.key (public: give it out) and NAME.key_secret (mode 600: keep
    it). The daemon takes server.key_secret (--curve-secret-key) and the clients' .key files
    (--curve-client); a client takes server.key and its own .key_secret."""
    from offload import _native

    for n in name or ["server", "client"]:
        try:
            public, secret = _native.curve_key_pair(str(directory), n, force)
        except ValueError as e:
            raise _fail(str(e)) from None
        print(f"{public}  (public: share it)\n{secret}  (secret: keep it, mode 600)")


def control_request(
    endpoint: str, message: str | list[bytes], timeout_s: float, curve: CurveKeys | None = None
) -> dict[str, Any]:
    """Sends one control command (a text, or the frames of a multipart command) and returns the
    daemon's JSON answer. With CURVE, a refused key is an error at once, not a timeout."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        curve.apply(sock)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_DISCONNECTED)
    try:
        sock.connect(endpoint)
        sock.send_multipart([message.encode()] if isinstance(message, str) else message)
        return dict(json.loads(_answer(sock, monitor, endpoint, timeout_s, curve is not None)))
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def _answer(
    sock: zmq.Socket[Any], monitor: zmq.Socket[Any], endpoint: str, timeout_s: float, curve: bool
) -> str:
    """Waits for the answer, watching the handshake: a key the daemon refuses is an error at once,
    and a timeout after connections closed mid-handshake says what is likely wrong."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    deadline, dropped = time.monotonic() + timeout_s, 0
    while (left := deadline - time.monotonic()) > 0:
        ready = dict(poller.poll(int(left * 1000) + 1))
        if sock in ready:
            return str(sock.recv_string())
        if monitor in ready:
            if recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                raise PermissionError(
                    f"{endpoint} refused this client's key: the daemon must admit its public half "
                    "(--curve-client NAME.key)"
                )
            dropped += 1
    hint = ""
    if dropped:
        why = "is --server-key the daemon's?" if curve else "does it need CURVE (--server-key, --client-key)?"
        hint = f"; the daemon closed the connection {dropped} times during the handshake: {why}"
    raise TimeoutError(f"no answer from {endpoint} within {timeout_s} s{hint}")


def curve_keys(server_key: Path | None, client_key: Path | None) -> CurveKeys | None:
    """The keys of --server-key and --client-key: both or neither."""
    if (server_key is None) != (client_key is None):
        raise _fail("CURVE needs both --server-key (the daemon's public key) and --client-key (your secret)")
    return CurveKeys(server_key, client_key) if server_key and client_key else None


def _command(
    control: str, message: str | list[bytes], timeout: float, server_key: Path | None, client_key: Path | None
) -> None:
    """Sends a control command, prints the JSON answer, exits 1 if it says not ok."""
    try:
        answer = control_request(control, message, timeout, curve_keys(server_key, client_key))
    except (TimeoutError, PermissionError, ValueError) as e:
        raise _fail(str(e)) from None
    print(json.dumps(answer, indent=2))
    if answer.get("ok") is False:
        raise typer.Exit(1)


@app.command()
def stats(
    control: ControlOpt,
    timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 5.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Print the daemon's counters, latency quantiles, serving version and authentication counts
    as JSON."""
    _command(control, "stats", timeout, server_key, client_key)


@app.command()
def reload(
    control: ControlOpt,
    ruletype: Annotated[Path, typer.Option("--ruletype", help="New rule type.")],
    rules: Annotated[Path, typer.Option("--rules", help="New rules CSV.")],
    send: Annotated[
        bool,
        typer.Option(
            "--send",
            help="Send the two files' contents (read here) instead of their paths: for a daemon on "
            "another machine, or files outside its reload directories. \\[default: send the paths]",
            show_default=False,
        ),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for load + compile.")] = 120.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Load and compile a new rule set off the hot path, then swap it in atomically. Requests in
    flight finish on the old version; every reply names the version that answered. Paths are
    read by the daemon, only under its reload directories (relative ones under the first)."""
    message: str | list[bytes]
    if send:
        try:
            contents = [ruletype.read_bytes(), rules.read_bytes()]
        except OSError as e:
            raise _fail(str(e)) from None
        message = [f"reload-inline\n{ruletype.name}\n{rules.name}".encode(), *contents]
    else:
        message = f"reload\n{ruletype}\n{rules}"
    _command(control, message, timeout, server_key, client_key)


@app.command("set")
def set_(
    control: ControlOpt,
    name: Annotated[str, typer.Argument(help="batch_max_queries or batch_timeout_us.")],
    value: Annotated[int, typer.Argument(help="The new value (takes effect at the next batch).")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 5.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Change a batching knob while the daemon serves."""
    _command(control, f"set {name} {value}", timeout, server_key, client_key)
