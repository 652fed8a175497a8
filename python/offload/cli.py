"""The `offload` command."""

from __future__ import annotations

from typing import Annotated

import typer

from offload import __version__
from offload.rules.cli import app as rules_app
from offload.serve.cli import app as serve_app

app = typer.Typer(
    help="offload: run data services on accelerators and near-data devices, and know when that pays.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(rules_app, name="rules")
app.add_typer(serve_app, name="serve")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
