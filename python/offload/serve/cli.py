"""`offload serve`: run the daemon; `offload serve keys` makes CURVE key pairs; `offload serve
stats|reload|set` talk to its control socket (docs/serve-protocol.md); `offload serve inject`
replays a trace against it, `offload serve bench` measures it with the Rust load generator and
`offload serve sweep` measures a grid of its configurations."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from offload.clitools import JsonOpt, OutOpt, console, emit, err, failing, floats, ints
from offload.clitools import fail as _fail
from offload.serve import CurveKeys
from offload.serve.control import control_request

_DAEMON_ARGS = "offload.serve.daemon_args"


class _DaemonGroup(TyperGroup):
    """`offload serve` without a subcommand hands its arguments, untouched, to the daemon's one
    settings parser (offload_serve::config::Settings in Rust, the same as `offload-serve`'s), so
    each setting is declared once; `--help` lists the subcommands, then that parser's options."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not {"-h", "--help"} & set(args):
            ctx.meta[_DAEMON_ARGS] = list(args)
            args = []
        return super().parse_args(ctx, args)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        from offload import _native

        super().format_help(ctx, formatter)
        formatter.write("\nThe daemon (offload serve [OPTIONS], the same as offload-serve [OPTIONS]):\n\n")
        formatter.write(_native.serve_help("offload serve"))


app = typer.Typer(
    cls=_DaemonGroup,
    help="Serve a rule set over ZeroMQ (protocol and security: docs/serve-protocol.md). Without a "
    "subcommand: start the daemon; `inject` replays a trace against it, `sweep` measures a grid of its "
    "configurations. Every endpoint binds loopback or IPC unless you say otherwise; "
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
# Positive seconds and rates: the least a float option that must be above 0 takes (typer states
# its range in --help; nan and inf are refused for every float option by offload.clitools).
_TINY = 1e-3
ConnectTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--connect-timeout",
        min=_TINY,
        max=3600.0,
        help="Seconds to wait for a connection to the control socket: nothing there within it, one line "
        "and exit 2 (then --timeout bounds the answer).",
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


@app.callback()
def serve(ctx: typer.Context) -> None:
    """Start the daemon until Ctrl-C or SIGTERM (queued requests are answered first)."""
    if ctx.invoked_subcommand is not None:
        return
    from offload import _native

    with failing(ValueError, OverflowError):
        result = _native.serve(ctx.meta.get(_DAEMON_ARGS, []))
    if isinstance(result, str):  # the text -V/--version asked for (--help never gets here)
        print(result, end="")
        return
    err.print("stopped: " + ", ".join(f"{k} {v}" for k, v in result), highlight=False)


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
        with failing(ValueError):
            public, secret = _native.curve_key_pair(str(directory), n, force)
        print(f"{public}  (public: share it)\n{secret}  (secret: keep it, mode 600)")


def curve_keys(server_key: Path | None, client_key: Path | None) -> CurveKeys | None:
    """The keys of --server-key and --client-key: both or neither."""
    if (server_key is None) != (client_key is None):
        raise _fail("CURVE needs both --server-key (the daemon's public key) and --client-key (your secret)")
    return CurveKeys(server_key, client_key) if server_key and client_key else None


def _command(
    control: str,
    message: str | list[bytes],
    timeouts: tuple[float, float],
    server_key: Path | None,
    client_key: Path | None,
) -> None:
    """Sends a control command within (connect, answer) timeouts, prints the JSON answer, exits
    1 if it says not ok."""
    connect, timeout = timeouts
    with failing(TimeoutError, PermissionError, ValueError):
        answer = control_request(control, message, timeout, curve_keys(server_key, client_key), connect)
    print(json.dumps(answer, indent=2))
    if answer.get("ok") is False:
        raise typer.Exit(1)


@app.command()
def stats(
    control: ControlOpt,
    timeout: Annotated[float, typer.Option(min=_TINY, max=3600.0, help="Seconds to wait.")] = 5.0,
    connect_timeout: ConnectTimeoutOpt = 5.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Print the daemon's counters, latency quantiles, serving version and authentication counts
    as JSON."""
    _command(control, "stats", (connect_timeout, timeout), server_key, client_key)


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
    sha256: Annotated[
        str | None,
        typer.Option(
            "--sha256",
            help="The rules file's SHA-256 (64 hex digits, as sha256sum prints it): the daemon checks what "
            "it read against it and keeps the served set if they differ (a file still being written). "
            "\\[default: none: not checked]",
        ),
    ] = None,
    rows: Annotated[
        int | None,
        typer.Option(
            "--rows",
            min=0,
            help="The number of rules the file holds: another count is refused the same way. "
            "\\[default: none: not checked]",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=_TINY, max=86400.0, help="Seconds to wait for load + compile.")
    ] = 120.0,
    connect_timeout: ConnectTimeoutOpt = 5.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Load and compile a new rule set off the hot path, then swap it in atomically. Requests in
    flight finish on the old version; every reply names the version that answered. Paths are
    read by the daemon, only under its reload directories (relative ones under the first).
    Write a new rules file under another name and rename it into place: a reload reads what is
    there, and --sha256 or --rows refuse a file still being written."""
    checks = reload_checks(sha256, rows)
    message: str | list[bytes]
    if send:
        with failing(OSError):
            contents = [ruletype.read_bytes(), rules.read_bytes()]
        message = [f"reload-inline\n{ruletype.name}\n{rules.name}{checks}".encode(), *contents]
    else:
        message = f"reload\n{ruletype}\n{rules}{checks}"
    _command(control, message, (connect_timeout, timeout), server_key, client_key)


def reload_checks(sha256: str | None, rows: int | None) -> str:
    """The lines a reload command carries after its paths for --sha256 and --rows."""
    lines = ""
    if sha256 is not None:
        digest = sha256.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise _fail(f"--sha256 takes the 64 hex digits `sha256sum RULES` prints, not {sha256!r}")
        lines += f"\nsha256 {digest}"
    if rows is not None:
        lines += f"\nrows {rows}"
    return lines


@app.command("set")
def set_(
    control: ControlOpt,
    name: Annotated[str, typer.Argument(help="batch_max_queries or batch_timeout_us.")],
    value: Annotated[
        int,
        typer.Argument(
            min=0,
            help="The new value, within the setting's range (offload serve --help: batch_max_queries "
            "0..=1048576, batch_timeout_us 0..=1000000); it applies to the batch already waiting too.",
        ),
    ],
    timeout: Annotated[float, typer.Option(min=_TINY, max=3600.0, help="Seconds to wait.")] = 5.0,
    connect_timeout: ConnectTimeoutOpt = 5.0,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Change a batching knob while the daemon serves."""
    from offload import _native

    if name in ("batch_max_queries", "batch_timeout_us"):
        with failing(ValueError):  # the daemon's own range, checked here too: one line, exit 2
            _native.serve_check_setting(name, value)
    _command(control, f"set {name} {value}", (connect_timeout, timeout), server_key, client_key)


@app.command()
def inject(
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="The daemon's endpoint.")],
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type of the served set.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV of the served set.")],
    trace: Annotated[str, typer.Option(help="Directory with queries.csv + requests.csv.")],
    processes: Annotated[
        int,
        typer.Option(
            "--processes",
            "-p",
            "--connections",
            min=1,
            max=256,
            help="Connections (p) of the Rust load generator (client processes before; closed loop: "
            "one request out on each).",
        ),
    ] = 2,
    mode: Annotated[str, typer.Option(help="closed or open (Poisson arrivals).")] = "closed",
    rate: Annotated[
        float, typer.Option(min=_TINY, max=1e9, help="Open loop: requests/s over all connections.")
    ] = 1000.0,
    duration: Annotated[
        float, typer.Option(min=_TINY, max=86400.0, help="Seconds to inject (bounded by the trace too).")
    ] = 5.0,
    early_stop: Annotated[bool, typer.Option(help="Send each request's WANTED as stop_after.")] = False,
    encoded: Annotated[bool, typer.Option(help="Send queries pre-encoded instead of raw text.")] = False,
    request_size: Annotated[
        int,
        typer.Option(
            min=0, max=1 << 20, help="Cut the trace into requests of this many queries (0 = as traced)."
        ),
    ] = 0,
    connect_timeout: Annotated[
        float,
        typer.Option(
            min=_TINY,
            max=3600.0,
            help="Seconds to wait for the daemon's first reply (nothing there: fail, exit 2), and later for "
            "any owed reply before the daemon counts as gone (the run then stops).",
        ),
    ] = 5.0,
    out: Annotated[
        str, typer.Option(help="JSON to write, with --json too (a PNG breakdown goes beside it).")
    ] = "inject.json",
    as_json: JsonOpt = False,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Replay a user-request trace against `offload serve` with the Rust load generator (that of
    `offload serve bench`) and report throughput, latency percentiles and the per-stage
    breakdown. With --server-key and --client-key it connects with CURVE (data endpoints started
    with --curve-data-client). Exits 1, with one line on stderr, when requests failed
    (BadRequest, Malformed, ShuttingDown, or unanswered); Busy and DeadlineExceeded are counted,
    not failures."""
    from offload import rules as rules_api
    from offload.serve import ServeError
    from offload.serve import inject as inj

    if mode not in inj.MODES:
        raise _fail(f"--mode is one of {', '.join(inj.MODES)}, not {mode!r}")
    rs = rules_api.load(ruletype, rules)
    with failing(inj.TraceError):
        tr = inj.load_trace(Path(trace), rs.criterion_codes)
    if request_size > 0:
        tr = tr.fixed_size(request_size)
    if encoded:
        tr = tr.encoded(rules_api.compile(rs, "fast").encode(tr.columns))
    curve = curve_keys(server_key, client_key)
    with failing(ServeError, ValueError):
        result = inj.run(endpoint, tr, processes, mode, rate, duration, early_stop, curve=curve,
                         connect_timeout_s=connect_timeout)  # fmt: skip
    js, png = inj.write(result, Path(out))
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        c = console
        c.print(
            f"{result['requests']:,} requests answered in {result['elapsed_s']:.1f} s "
            f"({result['mode']} loop, {processes} connection(s)), {result['unanswered']:,} unanswered: "
            f"{result['requests_per_s']:,.0f} req/s, {result['queries_per_s']:,.0f} queries/s; "
            f"{inj.latency_line(result['latency_us'])}; status {result['status']}"
        )
        c.print(f"stage medians (µs): {result['stage_median_us']}")
        c.print(f"wrote {js} and {png}")
    failed = inj.failures(result)
    if failed:
        raise _fail(failed, 1)


@app.command()
def sweep(
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type to serve.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV to serve.")],
    trace: Annotated[str, typer.Option(help="Directory with queries.csv + requests.csv.")],
    processes: Annotated[
        str,
        typer.Option("--processes", "-p", help="Generator connections (p, as inject's), comma-separated."),
    ] = "1,2",
    p_old: Annotated[
        str | None, typer.Option("--p", hidden=True, help="Old spelling of --processes.")
    ] = None,
    w: Annotated[str, typer.Option("--w", help="Workers, comma-separated.")] = "1,2",
    k: Annotated[
        str,
        typer.Option(
            "--k",
            help="Kernel executors, comma-separated (0 = inline: the broker matches encoded "
            "requests, the workers raw ones).",
        ),
    ] = "1",
    e: Annotated[str, typer.Option("--e", help="Engine threads per executor, comma-separated.")] = "1",
    together: Annotated[
        str | None,
        typer.Option(
            "--together",
            help="Scale p = w = k together over these values, comma-separated (the seed's Fig. 5: one client "
            "process, one worker and one kernel executor more per step); replaces --processes, --w and --k, "
            "and the plot shows throughput and latency against the step. \\[default: none: the full grid]",
        ),
    ] = None,
    rates: Annotated[
        str,
        typer.Option(
            help="Load: 0 = closed loop (each connection waits for its reply); else open-loop Poisson "
            "arrival rates in requests/s, comma-separated."
        ),
    ] = "0",
    knee: Annotated[
        bool,
        typer.Option(
            "--knee",
            help="Drive each configuration to its knee instead: the most requests/s whose p99 stays within "
            "--p99-us (bisection, each rate decided by the majority of three runs of --duration), with the "
            "daemon's host path by thread role at that rate. Replaces --rates.",
        ),
    ] = False,
    knee_steps: Annotated[int, typer.Option(min=1, max=20, help="With --knee: bisections.")] = 5,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Batching policies, comma-separated: per-req, fillN (self-filling up to N queries: what is "
            "queued when an executor frees, never waiting), bN/Tus (size-or-timeout). "
            "\\[default: from --batch and --batch-timeout-us]"
        ),
    ] = None,
    batch: Annotated[
        str, typer.Option(help="Batch sizes (0 = per request), each size-or-timeout; see --policy.")
    ] = "0,4096",
    batch_timeout_us: Annotated[
        int,
        typer.Option(
            min=0, max=1_000_000, help="Cross-request batching wait (µs), from the first request's arrival."
        ),
    ] = 200,
    encoding: Annotated[
        str,
        typer.Option(
            help="How clients send queries, comma-separated: raw (text), codes16 or codes32 (encoded by the "
            "client with the daemon's dictionary)."
        ),
    ] = "raw",
    request_size: Annotated[
        str,
        typer.Option(help="Queries per request, comma-separated (0 = the trace's own request sizes)."),
    ] = "0",
    transport: Annotated[
        str,
        typer.Option(help="Transports, comma-separated: ipc, tcp (loopback) or shm (shared memory)."),
    ] = "ipc",
    duration: Annotated[
        float, typer.Option(min=_TINY, max=86400.0, help="Seconds per run (per knee step with --knee).")
    ] = 3.0,
    matcher: Annotated[
        str,
        typer.Option(
            help="The daemon's matchers, comma-separated: fast, null (no matching: the host path alone), "
            "emulated (a device from --emulate-profile), gpu (the kernel executors run on the CUDA device)."
        ),
    ] = "fast",
    emulate_profile: Annotated[
        str | None,
        typer.Option(help="With --matcher emulated: the device profile. \\[default: the bundled gpu-h200]"),
    ] = None,
    p99_us: Annotated[
        float, typer.Option(min=_TINY, help="Q1: best throughput with p99 under (µs); the knee's SLA.")
    ] = 5000.0,
    target_qps: Annotated[float, typer.Option(min=0.0, help="Q2: lowest p99 with at least q/s.")] = 1e6,
    out: Annotated[str, typer.Option(help="JSON to write, with --json too (+ .csv, .png).")] = "sweep.json",
    as_json: JsonOpt = False,
) -> None:
    """Measure a grid of service configurations (matcher, p, w, k or inline, e, batching policy,
    encoding, request size, transport; closed loop, open-loop rates or each one's knee) with the
    load generator, and draw the Pareto front."""
    from offload.serve import ServeError
    from offload.serve import sweep as sw

    p = p_old if p_old is not None else processes
    with failing(ValueError, RuntimeError):
        configs = _sweep_configs(p, w, k, e, together, policy, batch, batch_timeout_us, encoding,
                                 request_size, transport, matcher, rates, knee)  # fmt: skip
        setup = _sweep_setup(ruletype, rules, trace, configs, duration, p99_us, knee_steps, emulate_profile)
    c = err if as_json else console  # with --json, stdout holds only the JSON
    failed: list[dict[str, str]] = []
    with failing(ServeError):
        rows = sw.sweep(setup, configs, progress=lambda m: c.print(m, style="dim"), failed=failed)
        if not rows:
            raise ServeError(f"no point met the SLA: {failed[0]['why'] if failed else 'none measured'}")
    summary = sw.write(rows, Path(out), p99_us, target_qps, failed)
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    _print_sweep(summary, rows, p99_us, target_qps)
    for f in failed:
        c.print(f"[yellow]no knee:[/] {f['why']}", highlight=False)
    c.print(f"wrote {out} (+ .csv, .png)")


def _sweep_configs(
    p: str, w: str, k: str, e: str, together: str | None, policy: str | None, batch: str, timeout_us: int,
    encoding: str, request_size: str, transport: str, matcher: str, rates: str, knee: bool,
) -> list[Any]:  # fmt: skip
    """The sweep's points from its options, checked (a ValueError names the bad value)."""
    from offload.serve import grid
    from offload.serve import sweep as sw

    policies = grid.policies(policy, ints(batch), timeout_us)
    words = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    rest = {"encodings": words(encoding), "request_queries": ints(request_size),
            "transports": words(transport), "matchers": words(matcher)}  # fmt: skip
    if together is not None:
        configs = []
        for m, t, n, enc in itertools.product(rest["matchers"], rest["transports"], rest["request_queries"],
                                              rest["encodings"]):  # fmt: skip
            configs += sw.together(ints(together), ints(e), policies, floats(rates), encoding=enc,
                                   request_queries=n, transport=t, matcher=m)  # fmt: skip
    else:
        shapes = list(itertools.product(ints(w), ints(k), ints(e)))
        configs = sw.grid(grid.product(ints(p), shapes, policies, **rest), floats(rates), knee)
    sw.check(configs)
    return configs


def _sweep_setup(
    ruletype: str, rules: str, trace: str, configs: list[Any], duration: float, p99_us: float, steps: int,
    emulate_profile: str | None,
) -> Any:  # fmt: skip
    """The rules, the trace and the run lengths every point runs on; a matcher that cannot run
    here (no CUDA device for gpu) is a ValueError before any daemon starts."""
    from offload import rules as rules_api
    from offload.datafiles import data_path
    from offload.serve import inject as inj
    from offload.serve import sweep as sw

    matchers = {c.deployment.matcher for c in configs}
    if matchers & set(rules_api.DEVICE_MATCHERS):
        rules_api.gpu_device()  # a RuntimeError: say why before starting daemons that cannot start
    rs = rules_api.load(ruletype, rules)
    tr = inj.load_trace(Path(trace), rs.criterion_codes)
    profile = emulate_profile or str(data_path("plans", "whatif", "gpu-h200.toml"))
    return sw.Setup(ruletype, rules, tr, duration, p99_us, steps, profile, str(Path(trace) / "queries.csv"))


def _print_sweep(
    summary: dict[str, Any], rows: list[dict[str, Any]], p99_us: float, target_qps: float
) -> None:
    """The sweep's table, its two answers and the p = w = k series' ratios."""
    from rich.table import Table

    t = Table("configuration", "queries/s", "p50 µs", "p99 µs", "host path ns/q", "Pareto")
    front = set(summary["pareto"])
    for r in sorted(rows, key=lambda r: -r["queries_per_s"]):
        host = ((r.get("host_path") or {}).get("ns_per_query") or {}).get("host_path")
        t.add_row(r["label"], f"{r['queries_per_s']:,.0f}", f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}",
                  f"{host:,.0f}" if host else "", "yes" if r["label"] in front else "")  # fmt: skip
    console.print(t)
    b1, b2 = summary["best_under_p99"]["config"], summary["lowest_latency_for"]["config"]
    console.print(f"most throughput with p99 <= {p99_us:,.0f} µs: {b1['label'] if b1 else 'none'}")
    console.print(f"lowest p99 with >= {target_qps:,.0f} queries/s: {b2['label'] if b2 else 'none'}")
    for s in summary.get("together", []):
        if s["throughput_vs_first"] and s["p50_vs_first"]:
            ratios = (
                f"{s['throughput_vs_first']:.2f}x the first step's throughput, p50 {s['p50_vs_first']:.2f}x"
            )
            console.print(f"{s['label']}: {ratios}")


def _enter_generator_netns(name: str, endpoint: str) -> dict[str, str]:
    """Re-runs this command inside namespace offload-NAME joined to this one by a veth pair
    (offload.host.links.veth) unless it runs there already; returns the namespace and how it is
    joined. Where namespaces are unavailable, or the endpoint is not the daemon's loopback TCP
    one, a ValueError (one line, exit 2)."""
    import os

    from offload.host import links as L

    ns = L.namespace_name(name)
    if os.environ.get(L.ENV) != ns:
        why = L.unavailable_reason()
        if why:
            raise ValueError(f"--netns: {why}")
        if not endpoint.startswith("tcp://127.0.0.1:"):
            raise ValueError(
                f"--netns: the endpoint must be tcp://127.0.0.1:PORT (the daemon's here), not {endpoint}"
            )
        if L.veth(name)["made"] == "True":
            os.environ[L.MADE_ENV] = ns  # removed, with its veth pair, when the command ends
    L.reexec_inside(name)  # returns only inside
    tag = L.veth_tag(ns)
    return {"namespace": ns, "link": "veth", "device": f"ofc{tag}"}


@app.command()
def bench(
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="The daemon's endpoint.")],
    ruletype: Annotated[str, typer.Option("--ruletype", help="Rule type of the served set.")],
    rules: Annotated[str, typer.Option("--rules", help="Rules CSV of the served set.")],
    queries: Annotated[
        Path,
        typer.Option(help="Queries CSV (as `offload rules synth` writes), repeated to fill the requests."),
    ],
    request_size: Annotated[int, typer.Option(min=1, max=1 << 20, help="Queries per request.")] = 256,
    encoded: Annotated[
        bool,
        typer.Option(
            help="Send queries encoded here, with the dictionary fetched from the daemon (its version "
            "now), instead of raw text."
        ),
    ] = False,
    code_bits: Annotated[
        int,
        typer.Option(
            min=16,
            max=32,
            help="With --encoded: 16 = 16-bit codes where every code fits (else 32); 32 = always.",
        ),
    ] = 16,
    mode: Annotated[
        str,
        typer.Option(
            help="open: a fixed rate, latency from each request's due time; closed: --in-flight requests "
            "out per connection; knee: the most requests/s with p99 within --sla-p99-us, by bisection on "
            "the rate."
        ),
    ] = "open",
    rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1e9,
            help="Requests/s over all connections (knee: the first rate; 0 = from a closed loop).",
        ),
    ] = 1000.0,
    connections: Annotated[int, typer.Option(min=1, max=4096, help="DEALER connections.")] = 4,
    threads: Annotated[
        int, typer.Option(min=1, max=256, help="Sending threads (connection c on thread c mod threads).")
    ] = 1,
    in_flight: Annotated[
        int, typer.Option(min=1, max=1 << 20, help="Closed loop: requests out per connection.")
    ] = 1,
    max_in_flight: Annotated[
        int,
        typer.Option(
            min=1,
            max=1 << 20,
            help="Open loop: requests one connection holds out at most (then due ones wait).",
        ),
    ] = 1024,
    duration: Annotated[
        float, typer.Option(min=_TINY, max=86400.0, help="Seconds of sending (per run).")
    ] = 5.0,
    drain: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=3600.0,
            help="Seconds replies are still taken after; those still owed count as unanswered.",
        ),
    ] = 2.0,
    sla_p99_us: Annotated[
        float, typer.Option(min=_TINY, help="Knee: the p99 bound (µs, from due time).")
    ] = 5000.0,
    steps: Annotated[int, typer.Option(min=0, max=64, help="Knee: bisections on the rate.")] = 6,
    connect_timeout: Annotated[
        float,
        typer.Option(
            min=_TINY,
            max=3600.0,
            help="Seconds each connection waits for its first reply (nothing there: exit 2).",
        ),
    ] = 5.0,
    control: Annotated[
        str | None,
        typer.Option(
            "--control",
            "-c",
            help="The daemon's control endpoint: read its `stats` around the run and report the host "
            "path (the daemon's CPU per query by thread role, less matching) and the ceiling it implies; "
            "with --mode knee, measured in one more open-loop run at the knee's rate. \\[default: none: no "
            "host path]",
        ),
    ] = None,
    arrivals: Annotated[
        str,
        typer.Option(
            help="Open loop: fixed (one schedule at the rate) or poisson (exponential gaps, from --seed)."
        ),
    ] = "fixed",
    seed: Annotated[int, typer.Option(min=0, max=(1 << 63) - 1, help="Poisson arrivals: the seed.")] = 1,
    pacing: Annotated[
        str,
        typer.Option(
            help="ticks: wake at most once per tick, sending every due request in a burst (the tick: "
            "8 requests' worth of the rate, at most --max-tick-us); per-request: a wake-up per request "
            "and per reply (the generator before issue 40, to compare)."
        ),
    ] = "ticks",
    max_tick_us: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=1e6,
            help="The longest tick (µs; the knee: at most 1/25 of --sla-p99-us): sends are up to a tick "
            "late, in their latency; replies are timed at the tick they are taken at.",
        ),
    ] = 200.0,
    wake_on_replies: Annotated[
        bool,
        typer.Option(
            help="Ticks: also wake when a reply comes while nothing is due (finer reply times at low "
            "rates, more wake-ups)."
        ),
    ] = False,
    client_socket: Annotated[
        str,
        typer.Option(
            help="zmtp: the generator speaks ZeroMQ's wire protocol itself (one write per tick, one read "
            "per pass, no I/O thread); libzmq: libzmq's DEALER (the generator before issue 40; always with "
            "CURVE keys)."
        ),
    ] = "zmtp",
    cpus: Annotated[
        str | None,
        typer.Option(
            help="Run the generator (every thread of this process) on these CPUs only, e.g. 1 or 2-3; "
            "give the daemon others (offload serve --cpus 0). \\[default: any]"
        ),
    ] = None,
    netns: Annotated[
        str | None,
        typer.Option(
            help="Run the generator in network namespace offload-NAME (made if missing), joined to this "
            "one by a veth pair on loopback addresses, as a remote client: the endpoint must be "
            "tcp://127.0.0.1:PORT as the daemon here binds it. Needs root and iproute2. \\[default: here]"
        ),
    ] = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    server_key: ServerKeyOpt = None,
    client_key: ClientKeyOpt = None,
) -> None:
    """Measure the daemon with the Rust load generator: open loop at a fixed rate free of
    coordinated omission (as wrk2), many requests in flight per connection, frames built before
    the clock starts; reports p50/p90/p99/p99.9 from due time, the achieved rates, the generator's
    own CPU and whether it was the bound, and with --control the daemon's host path per query.
    Exits 1 when requests were not served (not Ok, or unanswered at the end of the drain)."""
    from offload import rules as rules_api
    from offload.rules.bench import load_query_columns
    from offload.serve import bench as b

    if mode not in b.MODES:
        raise _fail(f"--mode is one of {', '.join(b.MODES)}, not {mode!r}")
    if arrivals not in b.ARRIVALS:
        raise _fail(f"--arrivals is one of {', '.join(b.ARRIVALS)}, not {arrivals!r}")
    if pacing not in b.PACINGS:
        raise _fail(f"--pacing is one of {', '.join(b.PACINGS)}, not {pacing!r}")
    if client_socket not in b.CLIENT_SOCKETS:
        raise _fail(f"--client-socket is one of {', '.join(b.CLIENT_SOCKETS)}, not {client_socket!r}")
    with failing(ValueError, OSError):
        cpu_set = b.parse_cpus(cpus) if cpus is not None else None
        client_netns = _enter_generator_netns(netns, endpoint) if netns is not None else None
    curve = curve_keys(server_key, client_key)
    with failing(ValueError, OSError):
        rs = rules_api.load(ruletype, rules)
        _, cols = load_query_columns(rs, queries)
        encoding: dict[str, int] = {}
        if encoded:
            frames, encoding = b.encoded_frames(
                endpoint, cols, list(rs.criterion_codes), request_size, code_bits, curve, connect_timeout
            )
        else:
            frames, _ = b.frames(cols, list(rs.criterion_codes), request_size)
        load = b.Load(mode, rate, connections, threads, in_flight, max_in_flight, duration, drain,
                      connect_timeout, sla_p99_us, steps, arrivals, seed, pacing, max_tick_us,
                      wake_on_replies, client_socket)  # fmt: skip
        with b.pinned(cpu_set):
            result = b.measure(endpoint, frames, load, curve, control, connect_timeout)
    placement = {"generator_cpus": sorted(cpu_set) if cpu_set else None, "generator_netns": client_netns}
    layout = {"request_size": request_size, "layout": "encoded" if encoded else "raw", **encoding}
    result = {**layout, **placement, **result}
    if not emit(result, as_json, out):
        for line in b.report(result):
            console.print(line, highlight=False)
        if out is not None:
            console.print(f"wrote {out}", highlight=False)
    failed = b.failures(result) if mode != "knee" else None
    if failed:
        raise _fail(failed, 1)
