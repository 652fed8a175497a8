"""The `offload` command."""

from __future__ import annotations

from typing import Annotated

import typer

from offload import __version__
from offload.rules.cli import app as rules_app

app = typer.Typer(
    help="offload: run data services on accelerators and near-data devices, and know when that pays.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(rules_app, name="rules")


def _version(value: bool) -> None:
    if value:
        print(f"offload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """offload: run data services on accelerators and near-data devices, and know when that pays."""


@app.command()
def demo(
    out: Annotated[
        str, typer.Option(help="Working directory for generated data and results.")
    ] = "build/demo",
    rules: Annotated[int, typer.Option(help="Rules to synthesise.")] = 100_000,
    requests: Annotated[int, typer.Option(help="User requests in the trace.")] = 2_000,
) -> None:
    """The main job: synthesise an MCT rule set and trace, compile, match with every matcher,
    print a summary with explained answers."""
    from offload.demo import run

    run(out, rules, requests)


@app.command()
def serve(
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type: ERBIUM .xml or native .toml.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV.")],
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint", "-e", help="ZeroMQ endpoint to bind (repeat): tcp://127.0.0.1:5555, ipc:///tmp/x"
        ),
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker threads (w): decode, encode, match, reply.")] = 2,
    engine_threads: Annotated[int, typer.Option(help="Matching threads per request (e).")] = 1,
    queue: Annotated[int, typer.Option(help="Requests that may wait; beyond that the reply is 'busy'.")] = 64,
    matcher: Annotated[str, typer.Option(help="linear, nfa, fast, or nfa:<order>.")] = "fast",
) -> None:
    """Serve a rule set over ZeroMQ (ROUTER; protocol in docs/serve-protocol.md) until Ctrl-C or
    SIGTERM; queued requests are answered before it exits. Clients: offload.serve.Client."""
    from rich.console import Console

    from offload import _native

    try:
        counters = _native.serve(
            ruletype, rules, endpoint or ["tcp://127.0.0.1:5555"], workers, engine_threads, queue, matcher
        )
    except ValueError as e:
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    Console(stderr=True).print("stopped: " + ", ".join(f"{k} {v}" for k, v in counters), highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
