"""`offload serve`: run the daemon; `offload serve stats|reload` talk to its control socket."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
import zmq

from offload.clitools import err
from offload.clitools import fail as _fail

app = typer.Typer(
    help="Serve a rule set over ZeroMQ (protocol: docs/serve-protocol.md). Without a subcommand: "
    "start the daemon.",
    invoke_without_command=True,
)
ControlOpt = Annotated[str, typer.Option("--control", "-c", help="The daemon's control endpoint.")]


@app.callback()
def serve(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Settings file (TOML; keys as the options below with _, e.g. `workers = 2`). "
            "Options given here override it.",
        ),
    ] = None,
    ruletype: Annotated[str | None, typer.Option("--ruletype", help="Rule type: .xml or .toml.")] = None,
    rules: Annotated[str | None, typer.Option("--rules", help="Rules CSV.")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            "-e",
            help="Endpoint to bind (repeat): tcp://127.0.0.1:5555, ipc:///tmp/x. [default: tcp://127.0.0.1:5555]",
        ),
    ] = None,
    control: Annotated[
        str | None, typer.Option("--control", "-c", help="Control endpoint for `stats`, `reload` and `set`.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker threads (w): decode, batch, encode. [default: 2]")
    ] = None,
    kernels: Annotated[
        int | None, typer.Option(help="Kernel executors (k), each matching one batch at a time. [default: 1]")
    ] = None,
    engine_threads: Annotated[
        int | None, typer.Option(help="Matching threads per kernel executor (e). [default: 1]")
    ] = None,
    queue: Annotated[
        int | None,
        typer.Option(help="Requests that may wait; beyond that the reply is 'busy'. [default: 64]"),
    ] = None,
    matcher: Annotated[
        str | None, typer.Option(help="linear, nfa, fast, or nfa:<order>. [default: fast]")
    ] = None,
    batch_max_queries: Annotated[
        int | None,
        typer.Option(
            help="Cross-request batching: queries per batch (0 = one request at a time). [default: 0]"
        ),
    ] = None,
    batch_timeout_us: Annotated[
        int | None,
        typer.Option(
            help="Cross-request batching: wait for more, from the first request's arrival. [default: 200]"
        ),
    ] = None,
    metrics: Annotated[
        str | None, typer.Option(help="Serve Prometheus text at http://ADDR/metrics, e.g. 127.0.0.1:9464.")
    ] = None,
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
        )
    except (ValueError, OverflowError) as e:
        raise _fail(str(e)) from None
    err.print("stopped: " + ", ".join(f"{k} {v}" for k, v in counters), highlight=False)


def control_request(endpoint: str, message: str, timeout_s: float) -> dict[str, Any]:
    """Sends one control command and returns the daemon's JSON answer."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_string(message)
        if not sock.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"no answer from {endpoint} within {timeout_s} s")
        return dict(json.loads(sock.recv_string()))
    finally:
        sock.close(linger=0)


@app.command()
def stats(
    control: ControlOpt, timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 5.0
) -> None:
    """Print the daemon's counters, latency quantiles and serving version as JSON."""
    _command(control, "stats", timeout)


def _command(control: str, message: str, timeout: float) -> None:
    """Sends a control command, prints the JSON answer, exits 1 if it says not ok."""
    try:
        answer = control_request(control, message, timeout)
    except TimeoutError as e:
        raise _fail(str(e)) from None
    print(json.dumps(answer, indent=2))
    if answer.get("ok") is False:
        raise typer.Exit(1)


@app.command()
def reload(
    control: ControlOpt,
    ruletype: Annotated[str, typer.Option("--ruletype", help="New rule type.")],
    rules: Annotated[str, typer.Option("--rules", help="New rules CSV.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for load + compile.")] = 120.0,
) -> None:
    """Load and compile a new rule set off the hot path, then swap it in atomically. Requests in
    flight finish on the old version; every reply names the version that answered."""
    _command(control, f"reload\n{ruletype}\n{rules}", timeout)


@app.command("set")
def set_(
    control: ControlOpt,
    name: Annotated[str, typer.Argument(help="batch_max_queries or batch_timeout_us.")],
    value: Annotated[int, typer.Argument(help="The new value (takes effect at the next batch).")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 5.0,
) -> None:
    """Change a batching knob while the daemon serves."""
    _command(control, f"set {name} {value}", timeout)
