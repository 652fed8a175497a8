"""The `offload` command."""

from __future__ import annotations

import os  # os, sys and signal are loaded with the interpreter: nothing before the handler
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the command starts (its modules load, a second on a fresh install where Python
    compiles them first; typer builds the command): one line and exit 130, as later in `main`,
    never an import traceback."""
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)  # nothing is open yet: no file written, no socket, no child


def _starting() -> object:
    """Ends the process on a Ctrl-C from now on (`_interrupted_while_starting`), where SIGINT is
    Python's default and this is the main thread; returns the handler to put back (None: none
    was replaced: a caller's own handler, or an ignored SIGINT, stays as it is)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    try:
        return signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread: its caller handles SIGINT
        return None


def _started(before: object) -> None:
    """A Ctrl-C is a KeyboardInterrupt again, which `main` turns into one line and 130."""
    if before is not None:
        signal.signal(signal.SIGINT, before)  # type: ignore[arg-type]


_BEFORE_LOADING = _starting()

import functools  # the imports from here on are what may be interrupted
from collections.abc import Callable
from typing import Annotated, Any

import typer

from offload import __version__
from offload.clitools import err, failing, finite_numbers, reflowed_help
from offload.dataservices import cli as node_cli
from offload.dataservices.cli import app as node_app
from offload.flows.cli import app as flows_app
from offload.metrics.cli import app as metrics_app
from offload.plan.cli import app as plan_app
from offload.probe.cli import app as probe_app
from offload.recsys.cli import app as recsys_app
from offload.rules.cli import app as rules_app
from offload.serve import cli as serve_cli
from offload.serve.cli import app as serve_app

app = typer.Typer(
    help="offload: run data services on accelerators and near-data devices, and know when that pays.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(rules_app, name="rules")
app.add_typer(serve_app, name="serve")
app.add_typer(probe_app, name="probe")
app.add_typer(plan_app, name="plan")
app.add_typer(recsys_app, name="recsys")


def _flow_service(node: Any) -> Any:
    """The particle flows a node hosts, imported when a node starts: `offload` itself loads no
    data-service stack (pyarrow, datasketches), which the GPU machines lack."""
    from offload.flows.network import FlowService

    return FlowService(node)


app.add_typer(node_app, name="node")
node_cli.SERVICES["flows"] = _flow_service  # every `offload node serve` takes part in particle flows
app.add_typer(flows_app, name="flows")
app.add_typer(metrics_app, name="metrics")


def _version(value: bool) -> None:
    if value:
        print(f"offload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """offload: run data services on accelerators and near-data devices, and know when that pays."""


@app.command()
def demo(
    out: Annotated[
        str, typer.Option(help="Working directory for generated data and results.")
    ] = "build/demo",
    rules: Annotated[int, typer.Option(help="Rules to synthesise.", min=1, max=10_000_000)] = 100_000,
    requests: Annotated[int, typer.Option(help="User requests in the trace.", min=1, max=1_000_000)] = 2_000,
) -> None:
    """The main job: synthesise an MCT rule set and trace, compile, match with every matcher,
    print a summary with explained answers."""
    from offload.demo import run

    run(out, rules, requests)


# Over 80 lines: the declarations of its 18 options; the logic below them is 24 lines.
@app.command()
def report(
    out: Annotated[
        str | None, typer.Option(help="HTML file to write (plots embedded). \\[default: report.html]")
    ] = None,
    bench: Annotated[
        str | None,
        typer.Option(help="`offload rules bench` JSON. \\[default: none: the section says how to make it]"),
    ] = None,
    probe: Annotated[
        str | None, typer.Option(help="`offload probe` profile JSON (plots beside). \\[default: none]")
    ] = None,
    sweep: Annotated[
        str | None, typer.Option(help="`offload serve sweep` JSON (its .png next to it). \\[default: none]")
    ] = None,
    calibration: Annotated[
        str | None, typer.Option(help="`offload plan calibrate` JSON. \\[default: none]")
    ] = None,
    recommend: Annotated[
        str | None, typer.Option(help="`offload plan recommend` JSON. \\[default: none]")
    ] = None,
    cost: Annotated[
        str | None, typer.Option(help="`offload plan cost --out` JSON. \\[default: none]")
    ] = None,
    recsys: Annotated[
        str | None,
        typer.Option(
            help="`offload recsys bench --out` JSON (its --plots in the same directory). \\[default: none]"
        ),
    ] = None,
    dataservices: Annotated[
        str | None, typer.Option(help="`offload node case-study --out` JSON. \\[default: none]")
    ] = None,
    flows: Annotated[
        str | None, typer.Option(help="`offload flows partition --json` output. \\[default: none]")
    ] = None,
    rpwu: Annotated[
        str | None,
        typer.Option(help="`offload metrics rpwu --json` output (its .png beside). \\[default: none]"),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="`offload flows run --json` or the flows bench's nodes.json (.png beside). \\[default: none]"
        ),
    ] = None,
    mbwu: Annotated[
        str | None, typer.Option(help="`offload metrics mbwu --json` output (.png beside). \\[default: none]")
    ] = None,
    headroom: Annotated[
        str | None,
        typer.Option(help="`offload metrics headroom --json` output (.png beside). \\[default: none]"),
    ] = None,
    availability: Annotated[
        str | None,
        typer.Option(help="`offload metrics availability --json` output (.png beside). \\[default: none]"),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="`rules bench --matcher gpu,...` JSON (benches/gpu/run.sh). \\[default: none]"),
    ] = None,
    gpu_check: Annotated[
        str | None,
        typer.Option(
            help="`offload plan check` JSON: the planner's GPU what-if against the service on the GPU. "
            "\\[default: none]"
        ),
    ] = None,
    host_path: Annotated[
        str | None,
        typer.Option(
            help="benches/serve_hostpath.py JSON (or make demo's serve-hostpath.json; .png beside): the "
            "service's knee and host path by configuration. \\[default: none]"
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Also write the reproduction index here as markdown (e.g. docs/seeds.md): every seed "
            "figure, its command, ours and a verdict, from data/seeds/index.toml and the JSON under "
            "benches/results (run from the repository root). Alone, only that is written. \\[default: none]"
        ),
    ] = None,
) -> None:
    """One static HTML report of the benchmark, probe, sweep, calibration, recommendation, cost,
    RM-SSD, near-data, particle-flow and metrics results, with plots; opens from disk.
    Sections not given say how to produce them. --seeds writes the seed reproduction index."""
    from pathlib import Path

    from offload import report as rep
    from offload.files import write_text
    from offload.report import seeds as seed_index

    def path(x: str | None) -> Path | None:
        if x is not None and not Path(x).exists():
            raise typer.BadParameter(f"{x}: no such file")
        return Path(x) if x else None

    given = (bench, probe, sweep, calibration, recommend, cost, recsys, dataservices, flows, rpwu, nodes,
             mbwu, headroom, availability, gpu, gpu_check, host_path)  # fmt: skip
    inputs = [path(x) for x in given]
    if seeds is not None:
        with failing(seed_index.SeedIndexError, OSError):  # names the row, or the file
            rows = seed_index.load(commands=seed_index.command_paths(typer.main.get_command(app)))
            Path(seeds).parent.mkdir(parents=True, exist_ok=True)
            write_text(Path(seeds), seed_index.markdown(rows, Path(seeds), seed_notes=seed_index.notes()))
        print(f"wrote {seeds}")
        if out is None and not any(inputs):
            return
    with failing(rep.ReportInputError):  # names the option and the file
        written = rep.build(Path(out or "report.html"), *inputs)
    print(f"wrote {written}")


def _old_name(name: str, command: Callable[..., None]) -> None:
    """`offload NAME` kept, hidden, for one release after it moved under `offload serve`."""

    @functools.wraps(command)
    def alias(*args: Any, **kwargs: Any) -> None:
        err.print(f"offload {name} is now offload serve {name} (the old name goes in the next release)",
                  highlight=False, soft_wrap=True)  # fmt: skip
        command(*args, **kwargs)

    app.command(name, hidden=True)(alias)


_old_name("inject", serve_cli.inject)
_old_name("sweep", serve_cli.sweep)


@functools.cache
def command() -> Any:
    """The `offload` command as click runs it: the typer app, every float option finite
    (`clitools.finite_numbers`). `main` runs it; the CLI tests inspect it."""
    return reflowed_help(finite_numbers(typer.main.get_command(app)))


def main() -> None:
    """Runs the command; every way it can end is one line on stderr at most, never a traceback
    (OFFLOAD_TRACEBACK=1 shows it): a bad argument (`usage_line`), a file that could not be
    written or read and a bad value exit 2, Ctrl-C "interrupted" and 130, anything else (a bug:
    please report it) exit 1."""
    import os
    import sys

    from offload.files import WriteError

    # Typer evaluates each option's annotation (eval) as it builds the command: CPython exits by
    # SIGINT, not 130, after a KeyboardInterrupt left an eval, even one caught here.
    before = _starting()
    try:
        built = command()
    finally:
        _started(before)
    try:
        code = built.main(prog_name="offload", standalone_mode=False)
    except KeyboardInterrupt:
        code = 130
    except typer.Abort:  # a prompt's Ctrl-D
        code = 130
    except Exception as e:
        if os.environ.get("OFFLOAD_TRACEBACK"):
            raise
        usage = usage_line(e)
        known = usage is not None or isinstance(e, (WriteError, OSError, ValueError))
        what = usage or (str(e) if isinstance(e, WriteError) else f"{type(e).__name__}: {e}")
        if not known:
            what = f"internal error, please report it ({what}); OFFLOAD_TRACEBACK=1 shows where"
        from rich.markup import escape

        if what:
            err.print(f"[bold red]error:[/] {escape(what)}", highlight=False, soft_wrap=True)
        sys.exit(2 if known else 1)
    if code == 130:  # typer turns a KeyboardInterrupt inside a command into exit 130
        err.print("interrupted", highlight=False)
        _forget_the_interrupt()
    sys.exit(code if isinstance(code, int) else 0)


def _forget_the_interrupt() -> None:
    """Exit 130, not death by SIGINT: CPython (pythonrun.c) marks a KeyboardInterrupt that left
    code run from a string (a dataclass's methods, a namedtuple are made so) as unhandled, even
    when it was caught later, and then ends by SIGINT whatever `sys.exit` said. The next such
    run clears the mark, so one is made here."""
    exec("None")


def usage_line(e: BaseException) -> str | None:
    """A bad argument (click's usage errors: an unknown option, a value out of its domain, a
    missing one) as one line naming the command and where its help is; None for other errors."""
    show = getattr(e, "format_message", None)
    ctx = getattr(e, "ctx", None)
    if show is None or getattr(e, "exit_code", None) != 2:
        return None
    if not str(show()).strip():  # no arguments at all: the help was shown
        return ""
    where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
    given = _given(getattr(e, "param", None))
    return " ".join(str(show()).split()) + (f" (given {given})" if given is not None else "") + where


def _given(param: Any) -> str | None:
    """The text given on the command line for the option ``param``, if it was given."""
    import sys

    args, opts = sys.argv[1:], [o for o in getattr(param, "opts", None) or [] if o.startswith("-")]
    given = None  # the last one given is the one taken
    for i, a in enumerate(args):
        if a in opts and i + 1 < len(args):
            given = args[i + 1]
        elif a.startswith(tuple(f"{o}=" for o in opts)):
            given = a.split("=", 1)[1]
    return given


_started(_BEFORE_LOADING)  # loaded

if __name__ == "__main__":
    main()
