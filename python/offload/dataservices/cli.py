"""`offload node ...`: near-data query nodes (seed 003) — serve a node, load data, query it.

serve a node → make particles → load them → query with SQL, offloaded or pushed back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from offload.clitools import (
    JsonOpt,
    OutOpt,
    compact_table,
    console,
    emit,
    enter_netns,
    err,
    fail,
    failing,
    oneline,
    progress,
    size_bytes,
)

app = typer.Typer(
    help="Near-data query nodes (Arrow Flight + Substrait): serve, particles, load, list, describe, "
    "drop, query, explain, train, case-study, cluster-load, cluster-query, netns.",
    no_args_is_help=True,
)
netns_app = typer.Typer(
    help="The network namespaces this tool made (named offload-NAME): list them, remove idle ones.",
    no_args_is_help=True,
)
app.add_typer(netns_app, name="netns")

DEFAULT_PORT = 8815
SERVICES: dict[str, Any] = {}
"""What every node that `serve` starts hosts beside its data sets, by name (node.Service): the
`offload` command adds the particle flows (offload/cli.py), as this package imports no part
above it."""
NodeOpt = Annotated[str, typer.Option("--node", "-n", help="The node's host:port.")]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="File holding the node's token. \\[default: $OFFLOAD_NODE_TOKEN, else node-PORT.token in "
        "~/.offload, which `serve` writes]",
    ),
]


def _token(node: str, token_file: Path | None) -> tuple[str, str]:
    """The node's token and where it came from (named when the node refuses it)."""
    from offload.dataservices.serving import default_token_file

    if token_file is None and os.environ.get("OFFLOAD_NODE_TOKEN"):
        return os.environ["OFFLOAD_NODE_TOKEN"], "from $OFFLOAD_NODE_TOKEN"
    path = (token_file or default_token_file(_port(node))).expanduser().absolute()
    try:
        return path.read_text().strip(), f"from {path}"
    except OSError as e:
        raise fail(f"cannot read the node token from {path}: {e.strerror}; pass --token-file") from None


def _port(node: str) -> int:
    try:
        return int(node.rsplit(":", 1)[-1])
    except ValueError:
        raise fail(f"--node {node!r}: give host:port") from None


def _client(node: str, token_file: Path | None, netns: str | None = None, timeout_s: float = 60.0) -> Any:
    from offload.dataservices.client import NodeClient

    _enter_existing(netns)

    token, source = _token(node, token_file)
    return NodeClient(node, token, timeout_s, token_source=source)


NetnsOpt = Annotated[
    str | None,
    typer.Option(
        help="Run inside the network namespace offload-NAME (NAME or offload-NAME: the prefix is never "
        "doubled), over its loopback: nodes and their clients must share it. `serve` makes it if "
        "missing and removes it at exit if it made it and nothing else is inside. \\[default: the "
        "host's loopback]"
    ),
]
WAYS = ("offload", "pushback", "auto")


def _way(way: str, allowed: tuple[str, ...] = WAYS) -> str:
    """``way`` if it is one of ``allowed``; else a one-line error naming them (exit 2)."""
    if way not in allowed:
        raise fail(f"--way {way!r}: give one of {', '.join(allowed)}")
    return way


def _enter_existing(netns: str | None) -> None:
    """A client's ``--netns``: it joins a namespace a node runs in, so one that does not exist is
    an error naming it (made here it would hold no node, and the call would only time out)."""
    if netns is None:
        return
    from offload.host import links as L

    with failing(ValueError):
        ns = L.namespace_name(netns)
    if os.environ.get(L.ENV) != ns and not L.unavailable_reason() and not L.exists(ns):
        known = ", ".join(L.namespaces()) or "none"
        raise fail(f"--netns {netns}: no namespace {ns} (start a node there with `offload node serve "
                   f"--netns {netns}`); this tool's: {known}")  # fmt: skip
    enter_netns(ns)


@app.command()
def serve(
    port: Annotated[
        int, typer.Option(min=0, max=65_535, help="Port to listen on (0: any free one).")
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="Address to bind; off loopback needs --allow-remote.")] = (
        "127.0.0.1"
    ),
    profile: Annotated[
        str, typer.Option(help="Resource budget: host (no limits), core (one core) or bluefield2 (seed 003).")
    ] = "host",
    threads: Annotated[
        int | None, typer.Option(min=1, max=1024, help="Query engine threads. \\[default: the profile's]")
    ] = None,
    cpu_per_thread: Annotated[
        float | None,
        typer.Option(min=0.001, max=1.0, help="Share of a core per thread. \\[default: the profile's]"),
    ] = None,
    memory: Annotated[
        str | None, typer.Option(help="Memory limit, e.g. 2G (none: no limit). \\[default: the profile's]")
    ] = None,
    link: Annotated[
        str | None,
        typer.Option(
            help="Link RATE[,DELAY], e.g. 1000mbit,0.5ms (needs --netns). \\[default: the profile's]"
        ),
    ] = None,
    netns: NetnsOpt = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Directory whose files `load --path` may register. \\[default: none]")
    ] = None,
    token_file: TokenFileOpt = None,
    models: Annotated[
        Path | None,
        typer.Option(
            help="Time models from `offload node train` for `auto` queries. \\[default: none: auto offloads]"
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="The node's name in answers and errors.")] = "node",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote", help="Allow a non-loopback --host (the token then travels in clear text)."
        ),
    ] = False,
    max_seconds: Annotated[
        float,
        typer.Option(
            min=0.0, max=31_536_000.0, help="Stop after this many seconds (0: run until Ctrl-C / SIGTERM)."
        ),
    ] = 0.0,
    batch_rows: Annotated[
        int, typer.Option(min=1, max=1 << 24, help="The most rows in one record batch the node sends.")
    ] = 65_536,
    batch_size: Annotated[
        str, typer.Option(help="The most Arrow bytes in one record batch the node sends, e.g. 4M.")
    ] = "4M",
    no_learn: Annotated[
        bool,
        typer.Option(
            "--no-learn",
            help="Do not learn online (by default every query served becomes a sample, and the time models "
            "are refitted in the background: docs/dataservices.md, Online adaptation).",
        ),
    ] = False,
    learn_cpu_share: Annotated[
        float,
        typer.Option(
            min=0.001,
            max=1.0,
            help="The most of the node's CPU its learning may take while it serves queries "
            "(an idle node refits at full speed).",
        ),
    ] = 0.05,
    learn_file: Annotated[
        Path | None,
        typer.Option(
            help="Keep the samples learned online in this file: read when the node starts (and refitted on), "
            "rewritten after each refit; a training file, so --models takes it too. \\[default: not kept]"
        ),
    ] = None,
    query_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            max=86_400.0,
            help="Seconds an offloaded query may run before the node stops it and says so. "
            "\\[default: 120 s over the profile's cores where under one: bluefield2 480 s]",
        ),
    ] = None,
    drain_time: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=3_600.0,
            help="At SIGTERM or Ctrl-C, seconds running queries may go on before they are stopped.",
        ),
    ] = 10.0,
    verified_only: Annotated[
        bool,
        typer.Option(
            "--verified-only", help="Refuse every file (registered or uploaded) without page checksums."
        ),
    ] = False,
    engines: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Engine processes running offloaded queries: a runaway query holds one, the others "
            "serve other clients.",
        ),
    ] = 2,
) -> None:
    """Serve a node: an Arrow Flight server that owns data sets and runs Substrait plans sent to
    it, or ships the columns they read back to the host, under a resource budget (CPU quota,
    memory limit, shaped link). Every call needs the node's token, written (mode 0600) to
    --token-file unless $OFFLOAD_NODE_TOKEN gives it."""
    from offload.dataservices import serving as S
    from offload.host import budgets as B

    with failing(ValueError):
        prof = S.with_overrides(B.profile(profile), threads, cpu_per_thread, memory, link)
    if prof.link.shaped and netns is None:
        if link is not None:
            raise fail("a shaped link needs --netns (tc shapes that namespace's loopback, never the host's)")
        console.print(f"the {prof.name} profile's link is not shaped: give --netns to shape it")
    data_dir = data_dir.absolute() if data_dir is not None else None
    with failing(ValueError):  # a bad name: one line, before anything is made
        enter_netns(netns)
    os.environ["TOKIO_WORKER_THREADS"] = str(prof.threads)  # before DataFusion starts its runtime
    with failing(ValueError):
        cfg = S.config(prof, B.profile(profile), host, port, data_dir, allow_remote, name, models)
        cfg.batch_rows, cfg.batch_bytes = batch_rows, size_bytes(batch_size)
        cfg.adapt, cfg.adapt_cpu_share, cfg.learn_file = not no_learn, learn_cpu_share, learn_file
        cfg.query_timeout_s = query_timeout or S.default_query_timeout(prof)
        cfg.drain_s, cfg.engines, cfg.verified_only = drain_time, engines, verified_only
        if learn_file is not None and learn_file.exists():
            from offload.dataservices import timemodel as TM

            TM.Models.read_samples(learn_file)  # a file that is not one: one line, before serving
    with failing(S.CannotServe):
        served = S.start(cfg, prof, netns, token_file, list(SERVICES.values()))
    if served.token_file is not None:
        console.print(f"token in {served.token_file}")
    console.print(f"{name} serving on {served.where}")
    console.print(S.budget_line(served.applied))
    S.wait(max_seconds)
    err.print(f"{name} stopping: running queries get {drain_time:g} s")
    if not served.stop():
        console.print(f"{name} stopped (calls still open past the drain time were cut)")
        console.file.flush()
        os._exit(0)  # gRPC would wait on them for good
    console.print(f"{name} stopped")


@app.command()
def particles(
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write.")],
    rows: Annotated[
        int, typer.Option(min=1, max=10**9, help="Particles (the seed's case studies: 6,177,731).")
    ] = 6_177_731,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Random seed.")] = 0,
    correlation: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="How much y follows x, 0 (independent) to 1.")
    ] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Generate a particle table (id, x, y, z, vx, vy, vz, t; positions uniform in [0, 1)),
    written as Parquet with page checksums, whole or not at all."""
    from offload.dataservices import particles as P

    try:
        t = P.generate(rows, seed=seed, correlation=correlation)
        path = P.write(t, out).absolute()
    except (ValueError, OSError) as e:
        raise fail(oneline(e)) from None
    res = {"path": str(path), "rows": t.num_rows, "bytes": path.stat().st_size}
    if emit(res, as_json):  # its --out is the Parquet file
        return
    console.print(f"wrote {path}: {t.num_rows:,} particles, {t.nbytes / 2**20:.1f} MiB in memory")


@app.command()
def load(
    name: Annotated[str, typer.Argument(help="Data set name on the node.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    file: Annotated[
        Path | None, typer.Option(help="Local Parquet/Arrow file to upload. \\[default: none]")
    ] = None,
    path: Annotated[
        str | None, typer.Option(help="File in the node's --data-dir to register. \\[default: none]")
    ] = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace a data set of that name on the node (without: refused)."),
    ] = False,
    verified_only: Annotated[
        bool,
        typer.Option(
            "--verified-only", help="Refuse a file without page checksums (its damage could not be found)."
        ),
    ] = False,
    rewrite_checksummed: Annotated[
        bool,
        typer.Option(
            "--rewrite-checksummed",
            help="Rewrite a Parquet file without page checksums in place with them, then load it (its "
            "values as they read now).",
        ),
    ] = False,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Give a node a data set: upload a local file (--file) or register one of its own (--path:
    relative to the node's --data-dir; a relative path that exists here is sent absolute, and the
    node takes it if it lies inside its data directory). A name the node has is refused unless
    --replace. A Parquet file with page checksums is verified as it is read; one without is
    loaded and said to be not verifiable, refused with --verified-only, or rewritten with them
    by --rewrite-checksummed."""
    from offload.dataservices.client import NodeError

    if (file is None) == (path is None):
        raise fail("give exactly one of --file (upload) or --path (a file on the node)")
    table = None
    if file is not None:
        table = _read_checked(file.absolute(), verified_only, rewrite_checksummed)
    elif not Path(path).is_absolute() and Path(path).exists():  # type: ignore[arg-type]
        path = str(Path(path).absolute())  # type: ignore[arg-type]
    with _client(node, token_file, netns, timeout_s=900) as c:  # loading sketches every column
        with failing(NodeError):
            if table is not None:
                d = c.upload(name, table, replace=replace)
            else:
                checks = {"verified_only": verified_only, "rewrite": rewrite_checksummed}
                d = c.register(name, str(path), replace=replace, **checks)
    if emit(d, as_json, out):
        return
    was = f" (replaced: {d['replaced']:,} rows before)" if d.get("replaced") is not None else ""
    mib, columns = d["bytes"] / 2**20, ", ".join(d["columns"])
    console.print(f"{d['name']}: {d['rows']:,} rows{was}, {mib:.1f} MiB, columns {columns}")
    console.print(f"{d['name']}: {_integrity_line(d.get('integrity', 'uploaded'))}")


def _integrity_line(kind: str) -> str:
    """What loading the data set's file could check, with what to do where it could not."""
    if kind.startswith("not verifiable"):
        return f"{kind} (rewrite it with --rewrite-checksummed, or refuse such files with --verified-only)"
    return kind


def _read_checked(path: Path, verified_only: bool, rewrite: bool) -> Any:
    """A local file's table for an upload, its integrity in the schema's metadata (the node keeps
    it): rewritten with page checksums first where ``rewrite``, refused (one line) where it has
    none and ``verified_only``."""
    from offload.dataservices import tablefiles
    from offload.dataservices.node import unverifiable

    with failing(ValueError, OSError):  # DamagedFile is a ValueError
        kind = tablefiles.integrity(path)
        if kind != tablefiles.VERIFIED and rewrite:
            tablefiles.rewrite_checksummed(path)
            kind = tablefiles.integrity(path)
        if kind != tablefiles.VERIFIED and verified_only:
            raise fail(f"{path}: {unverifiable(kind)}")
        table = tablefiles.read(path)
    meta = {**(table.schema.metadata or {}), tablefiles.INTEGRITY_KEY: kind.encode()}
    return table.replace_schema_metadata(meta)


@app.command(name="list")
def list_(
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """The node's data sets."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.serving import budget_line

    with _client(node, token_file, netns) as c:
        with failing(NodeError):
            st = c.status()
    if emit(st, as_json, out):
        return
    console.print(f"{st['name']}: {budget_line(st.get('budget') or {}, st['threads'])}")
    if "query_timeout_s" in st:
        console.print(f"{st['name']}: {st['engines']} engine processes; a query is stopped after "
                      f"{st['query_timeout_s']:g} s")  # fmt: skip
    if (a := st.get("adaptation")) is not None:
        console.print(f"{st['name']}: {_learning_line(a)}")
    t = compact_table(f"{st['name']}: data sets")
    for col in ("data set", "rows", "MiB", "columns", "source"):
        t.add_column(col, justify="right" if col in ("rows", "MiB") else "left")
    for d in st["datasets"]:
        t.add_row(
            d["name"], f"{d['rows']:,}", f"{d['bytes'] / 2**20:.1f}", ", ".join(d["columns"]), d["source"]
        )
    console.print(t)


def _learning_line(a: dict[str, Any]) -> str:
    """The node's online adaptation in one line: samples, refits, the worst stage's error."""
    worst = max(a.get("error", {}).items(), key=lambda kv: kv[1], default=None)
    error = f"; worst stage {worst[0]} off by {100 * worst[1]:.0f}% (median)" if worst else ""
    drifted = f"; drifted: {', '.join(a['drifted'])}" if a.get("drifted") else ""
    return (f"learning online: {a['samples']:,} samples ({a['training_samples']:,} from training), "
            f"{a['refits']} refits ({a['refit_cpu_s']:.1f} s CPU){error}{drifted}")  # fmt: skip


@app.command()
def describe(
    name: Annotated[str, typer.Argument(help="Data set name on the node.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """A data set on the node: its rows, bytes, source and schema, and per column the statistics
    the node estimates with (nulls, distinct values, min and max, frequent items where it keeps
    them; nested columns keep only their nulls: their estimates are unknown)."""
    from offload.dataservices.client import NodeError

    with _client(node, token_file, netns) as c:
        with failing(NodeError):
            d = c.describe(name)
            schema = c.schemas().get(name)
    fields = list(schema) if schema is not None else []
    d["schema"] = [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in fields]
    st = d.get("stats") or {}
    types = {f.name: f.type for f in fields}
    for col, cs in (st.get("columns") or {}).items():  # temporal bounds in their type (JSON: ISO 8601)
        cs.update({k: _typed(cs[k], types.get(col)) for k in ("min", "max") if k in cs})
    if emit(d, as_json, out, default=_json_value):
        return
    checked = escape(_integrity_line(d.get("integrity", "uploaded")))
    console.print(f"{d['name']}: {d['rows']:,} rows, {d['bytes'] / 2**20:.2f} MiB, "
                  f"from {escape(d['source'])} ({checked}); statistics over a sample of "
                  f"{st.get('sample_rows', 0):,} rows, built in {d.get('stats_s', 0):.2f} s")  # fmt: skip
    _columns_table(d["name"], types, st.get("columns") or {})


def _columns_table(name: str, types: dict[str, Any], columns: dict[str, dict[str, Any]]) -> None:
    """Per column its type and statistics (temporal bounds already in their type: describe);
    frequent items only where the node sends some."""
    frequent = any(_frequent(cs) != "-" for cs in columns.values())
    t = compact_table(f"{name}: columns")
    for col in ("column", "type", "nulls", "distinct", "min", "max", *(("frequent",) if frequent else ())):
        t.add_column(col, justify="right" if col in ("nulls", "distinct") else "left")
    for col, cs in columns.items():
        distinct = "estimates unknown" if cs.get("distinct") is None else f"{cs['distinct']:,}"
        kind = types.get(col)
        cells = [col, escape(str(kind or "?")), f"{cs.get('nulls', 0):,}", distinct]
        cells += [_cell(cs.get(k)) for k in ("min", "max")]
        cells += [_frequent(cs)] if frequent else []
        t.add_row(*cells)
    console.print(t)


def _typed(v: Any, kind: Any) -> Any:
    """A sketch's number for a date, time, timestamp or duration column as a value of that type
    (the sketch keeps the column's stored integer: days, or units since the epoch or midnight)."""
    import pyarrow as pa

    temporal = kind is not None and pa.types.is_temporal(kind) and not pa.types.is_interval(kind)
    if not temporal or not isinstance(v, int | float) or isinstance(v, bool):
        return v
    stored = pa.int32() if kind.bit_width == 32 else pa.int64()
    try:
        return pa.array([round(v)], stored).view(kind)[0].as_py()
    except (pa.ArrowException, OverflowError, ValueError):
        return v  # out of the type's range: the number as it came


def _cell(v: Any) -> str:
    """A statistic for a table cell (markup escaped)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, bytes):
        return escape(_json_value(v))
    return escape(str(v))  # a datetime as "2024-01-01 00:00:00+00:00": it may wrap at the space


def _frequent(cs: dict[str, Any], most: int = 3) -> str:
    """The first few frequent items where the node sends them: values, or (value, count) pairs."""
    items = next((cs[k] for k in ("frequent", "frequent_items", "top") if cs.get(k)), None)
    if not items:
        return "-"
    values = list(items) if isinstance(items, dict) else [_item(i) for i in items]
    return ", ".join(_cell(v) for v in values[:most]) + (", ..." if len(values) > most else "")


def _item(i: Any) -> Any:
    if isinstance(i, list | tuple):
        return i[0] if i else None
    return i.get("value") if isinstance(i, dict) else i


@app.command()
def drop(
    name: Annotated[str, typer.Argument(help="Data set name on the node.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Drop a data set from the node (its rows and statistics; a file it was registered from
    stays where it is). An unknown name is an error naming the ones the node has."""
    from offload.dataservices.client import NodeError

    with _client(node, token_file, netns) as c:
        with failing(NodeError):
            if not c.drop(name):
                st = c.status()
                known = ", ".join(sorted(d["name"] for d in st["datasets"])) or "none"
                raise fail(f"unknown data set {name!r} on {st['name']}; known: {known}")
    if emit({"name": name, "dropped": True}, as_json, out):
        return
    console.print(f"dropped {name}")


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over the node's data sets.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    way: Annotated[
        str,
        typer.Option(
            help="offload (run on the node), pushback (run here), both (side by side), or auto (the "
            "node decides, and says what and why)."
        ),
    ] = "both",
    compression: Annotated[str, typer.Option(help="IPC compression on the wire: none, lz4, zstd.")] = "none",
    show: Annotated[int, typer.Option(min=0, max=10**6, help="Result rows to print (text output).")] = 5,
    rows: Annotated[
        int,
        typer.Option(
            min=0,
            max=10**9,
            help="Result rows in --json/--out (the first N; `truncated` says if there were more).",
        ),
    ] = 1000,
    save: Annotated[
        Path | None,
        typer.Option(
            help="Write the whole result to this file, as Parquet (.parquet), Arrow IPC (.arrow, "
            ".feather) or CSV (.csv), whole or not at all. \\[default: none]"
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=86_400.0,
            help="Seconds to wait for the node's answer (a node stops a query at its own --query-timeout, "
            "120-600 s by default, and says so).",
        ),
    ] = 660.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Let --save replace a file that exists, if it is a result --save wrote (Parquet or "
            "Arrow marked so); any other file is refused.",
        ),
    ] = False,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run a query on a node: offloaded (the node runs the plan and ships the result), pushed
    back (the node ships the columns it reads and this host runs the plan), both, side by side,
    or the way the node picks (auto), with where the time went. --json has the timings and the
    result's first --rows rows; --save writes the whole result to a file."""
    from offload.dataservices import plans, tablefiles
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    ways = ("offload", "pushback") if way == "both" else (_way(way, (*WAYS, "both")),)
    comp = _compression(compression)
    if save is not None and save.suffix.lower() not in tablefiles.WRITTEN:
        raise fail(f"--save {save}: give a file ending in {', '.join(tablefiles.WRITTEN)}")
    if save is not None:
        _may_replace(save, force)
    runs = {}
    with _client(node, token_file, netns, timeout) as c:
        with failing(NodeError, PlanError, ValueError):
            plan = c.plan(sql)
            for w in ways:
                runs[w] = c.query(plan, w, comp)
    same = plans.same_answer(*(r[0] for r in runs.values())) if len(runs) == 2 else None
    result = next(iter(runs.values()))[0]
    if save is not None:
        _may_replace(save, force)  # again: a file may have come meanwhile
        _save(result, save, json.dumps({"sql": sql, "node": node, "by": "offload node query --save"}))
    doc = {"sql": sql, "runs": {w: t.as_dict() for w, (_, t) in runs.items()}, "same_answer": same,
           "result": _records(result, rows), "saved": str(save.absolute()) if save else None}  # fmt: skip
    if emit(doc, as_json, out, default=_json_value):
        return
    console.print(result.slice(0, show).to_pandas().to_string(index=False) if show else "")
    if "auto" in runs:
        tm = runs["auto"][1]
        why = (tm.decision or {}).get("why", "the node gave no reason")
        console.print(f"auto: the node chose {tm.way}: {escape(_reason(tm.way, why))}")
        runs = {f"auto ({tm.way})": runs["auto"]}
    _timing_table(runs, same)
    if save is not None:
        console.print(f"wrote {result.num_rows:,} rows to {save} ({tablefiles.WRITTEN[save.suffix.lower()]})")


def _reason(way: str, why: str) -> str:
    """The node's why without its leading "WAY: " (the line says the way already)."""
    return why.removeprefix(f"{way}: ")


def _compression(text: str) -> str | None:
    if text not in ("none", "lz4", "zstd"):
        raise fail(f"--compression {text!r}: give one of none, lz4, zstd")
    return None if text == "none" else text


def _records(table: Any, limit: int) -> dict[str, Any]:
    """The result for JSON: its row count, columns and types, and its first ``limit`` rows as
    records (``truncated`` when there were more)."""
    return {
        "rows": table.num_rows,
        "columns": [{"name": f.name, "type": str(f.type)} for f in table.schema],
        "records": table.slice(0, limit).to_pylist(),
        "truncated": table.num_rows > limit,
    }


def _json_value(v: Any) -> Any:
    """A result value JSON has no type for: dates and times in ISO 8601, decimals as their exact
    text, binaries in base64, durations in seconds."""
    import base64
    import datetime as dt

    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return str(v)  # Decimal, and anything else: its text


def _may_replace(path: Path, force: bool) -> None:
    """--save's file may be written: it does not exist, or --force and it is a result file
    --save wrote (its mark: tablefiles.marked); else one line naming it, exit 2."""
    from offload.dataservices import tablefiles

    if not path.exists() and not path.is_symlink():
        return
    if not force:
        raise fail(f"--save {path}: the file exists; give --force to replace it (only a result file "
                   "--save wrote is replaced), or another name")  # fmt: skip
    if not path.is_file() or path.is_symlink() or not tablefiles.marked(path):
        raise fail(f"--save {path}: not a result file --save wrote (no offload.result mark; CSV "
                   "carries none), so --force does not replace it: remove it yourself or pick "
                   "another name")  # fmt: skip


def _save(table: Any, path: Path, mark: str | None = None) -> None:
    """Writes ``table`` whole to ``path`` (tablefiles.write, ``mark`` in its schema's metadata);
    a failure is one line, exit 2."""
    from offload.dataservices import tablefiles

    try:
        tablefiles.write(table, path, mark)
    except OSError as e:
        raise fail(oneline(e)) from None
    except ValueError as e:
        raise fail(str(e)) from None


def _timing_table(runs: dict[str, Any], same: bool | None) -> None:
    """Stages as rows, ways as columns (ms), so the table fits a terminal."""
    t = compact_table("where the time went (ms)" + ("" if same is None else f"; same answer: {same}"))
    t.add_column("stage")
    for w in runs:
        t.add_column(w, justify="right")
    stages = (
        ("check (get_flight_info)", "info"),
        ("node: engine", "node_engine"),
        ("node: whole stream", "node"),
        ("fetch (host side)", "fetch"),
        ("host: run the plan", "host"),
        ("total", "total"),
    )
    for label, key in stages:
        t.add_row(label, *(f"{1e3 * getattr(tm, key):.1f}" for _, tm in runs.values()))
    t.add_row("rows", *(f"{tm.rows:,}" for _, tm in runs.values()))
    t.add_row("Arrow MiB received", *(f"{tm.arrow_bytes / 2**20:.2f}" for _, tm in runs.values()))
    console.print(t)


@app.command()
def explain(
    sql: Annotated[str, typer.Argument(help="SQL over the node's data sets.")],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    run: Annotated[
        bool, typer.Option("--run", help="Also run the query both ways and set the measured times beside.")
    ] = False,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """What the node expects of a query and what it would do, before running it: the estimated
    result rows and bytes and the steps that led there; the way it picks (auto) and why; both
    ways' predicted stages; the link rate at which the other way would win. With --run, both ways
    measured beside the predictions."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    with _client(node, token_file, netns) as c:
        with failing(NodeError, PlanError):
            plan = c.plan(sql)
            ex = c.explain(plan)
            link = ((c.status().get("budget") or {}).get("link") or {}).get("rate_mbit")
            runs = {w: c.query(plan, w)[1] for w in ("offload", "pushback")} if run else {}
    doc = {"sql": sql, **ex, "link_mbit": link, "runs": {w: t.as_dict() for w, t in runs.items()}}
    if runs:
        faster = min(runs, key=lambda w: runs[w].total)
        doc["measured"] = {"faster": faster, "decision_right": ex["way"] == faster,
                           "rows": runs["offload"].rows}  # fmt: skip
    if emit(doc, as_json, out):
        return
    _show_explain(ex, link, runs)


def _show_explain(ex: dict[str, Any], link: float | None, runs: dict[str, Any]) -> None:
    """The node's explain as text: the estimate and its steps, the decision and why (a fallback
    says so), both ways' predicted stages beside the measured ones, the crossover."""
    est = ex.get("estimate")
    if est is None:
        console.print("[bold]estimate[/]: none (the node could not estimate this query)")
    else:
        console.print(f"[bold]estimate[/]: {est['rows']:,.1f} rows, {est['bytes'] / 2**20:.2f} MiB "
                      f"({1e3 * est['seconds']:.2f} ms to estimate)")  # fmt: skip
        for step in est["steps"]:
            console.print(f"  {escape(step)}")
    how = " (fallback)" if ex.get("fallback") else ""
    console.print(f"[bold]decision[/]: {ex['way']}{how}: {escape(_reason(ex['way'], ex['why']))}")
    cpu = ex.get("decision_cpu_s")
    if cpu is not None:
        again = " (reused: the same plan, data and models decided before)" if ex.get("reused") else ""
        console.print(f"  decided in {1e3 * cpu:.2f} ms of the node's CPU{again}")
    d = ex.get("decision")
    if d is not None:
        _stages_table(d, runs)
        console.print(_crossover_line(d, link))
        if runs:
            console.print(
                "(measured, the link beyond the node is inside the host's receive: fetch - node stream)"
            )
    if runs:
        _measured(est, ex["way"], runs, with_table=d is None)


STAGE_ORDER = ("request", "node (engine, stream)", "node stream", "link beyond the node", "host receive",
               "host engine")  # fmt: skip
"""The predicted stages in the order the time is spent (names the node does not send are left out;
new ones follow)."""


def _measured_stages(t: Any) -> dict[str, float | None]:
    """A measured Timing in the predicted stages' words, as the training suite defines them: the
    request is the check (get_flight_info), the node's stream its whole stream, the host's receive
    the fetch beyond it (it holds the link: the two are not told apart)."""
    node = t.node
    return {"request": t.info, "node (engine, stream)": node, "node stream": node,
            "link beyond the node": None, "host receive": t.fetch - node, "host engine": t.host}  # fmt: skip


def _stages_table(d: dict[str, Any], runs: dict[str, Any]) -> None:
    """Both ways' predicted stages (ms) as rows; with runs, the measured ones beside."""
    off, back = d["offload"], d["pushback"]
    names = [k for k in STAGE_ORDER if k in off or k in back]
    for k in (*off, *back):
        if k not in names:
            names.append(k)
    t = compact_table("predicted stages (ms)" + ("; measured beside" if runs else ""))
    t.add_column("stage")
    cols = (("offload", off), ("pushback", back))
    for w, _ in cols:
        t.add_column(w, justify="right")
        if runs:
            t.add_column(f"{w} measured", justify="right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{1e3 * v:.1f}"

    for name in names:
        cells = []
        for w, stages in cols:
            cells.append(ms(stages.get(name)))
            if runs:
                cells.append(ms(_measured_stages(runs[w]).get(name)) if name in stages else "-")
        t.add_row(name, *cells)
    totals = [ms(d["offload_s"])] + ([ms(runs["offload"].total)] if runs else [])
    totals += [ms(d["pushback_s"])] + ([ms(runs["pushback"].total)] if runs else [])
    t.add_row("total", *totals)
    console.print(t)


def _crossover_line(d: dict[str, Any], link_mbit: float | None) -> str:
    """Where the other way would win, and the link the node has."""
    where = f"this node's link: {link_mbit:,.0f} Mbit/s" if link_mbit else "this node's link is not shaped"
    rate, above = d.get("crossover_mbit"), d.get("above_crossover")
    if rate is None or above is None:
        return f"crossover: none: {d['way']} wins at every rate from 0.8 Mbit/s to 1 Tbit/s ({where})"
    below = "pushback" if above == "offload" else "offload"
    return f"crossover: {above} wins on links above {rate:,.0f} Mbit/s, {below} below ({where})"


def _measured(est: dict[str, Any] | None, chose: str, runs: dict[str, Any], with_table: bool) -> None:
    """The measured rows against the estimate, which way was faster, and whether the node's
    choice was it."""
    rows = runs["offload"].rows
    off_by = "" if est is None else f" (estimate off by {100 * abs(est['rows'] - rows) / max(rows, 1):.2f}%)"
    console.print(f"[bold]measured[/]: {rows:,} rows{off_by}")
    if with_table:
        _timing_table({w: (None, t) for w, t in runs.items()}, None)
    faster = min(runs, key=lambda w: runs[w].total)
    other = max(runs, key=lambda w: runs[w].total)
    gain = 1 - runs[faster].total / runs[other].total
    right = "right" if faster == chose else "not the faster way this time"
    console.print(f"{faster} was faster by {100 * gain:.1f}%; the node's choice ({chose}) was {right}")


@app.command()
def train(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Training file to write (samples are added to it).")
    ],
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    sizes: Annotated[str, typer.Option(help="Particle table sizes to train on, comma-separated.")] = (
        "100000,400000,1600000"
    ),
    queries: Annotated[
        int, typer.Option(min=1, max=10_000, help="Queries per table size (random thresholds).")
    ] = 30,
    repeat: Annotated[
        int,
        typer.Option(
            min=1,
            max=1_000,
            help="Runs of each query each way; the medians are kept (a quota-held node jitters).",
        ),
    ] = 3,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the tables and thresholds.")] = 0,
    suite: Annotated[
        str,
        typer.Option(
            help="particles (the seed's float tables), generated (random schemas: strings, dates, "
            "joins, group-bys, wide and narrow rows) or all."
        ),
    ] = "all",
    schemas: Annotated[
        int, typer.Option(min=1, max=1_000, help="Generated schemas to train on (--suite generated or all).")
    ] = 6,
    schema_sizes: Annotated[
        str,
        typer.Option(
            help="Rows of the generated narrow fact tables, comma-separated (wider ones get fewer rows, "
            "to about the same bytes)."
        ),
    ] = "100000,200000,400000",
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the time models on a running node: upload tables of a few sizes (the seed's
    particles, and random schemas of every common column type), run a suite of queries both
    ways, and keep the node's engine and stream seconds (its profile's system type) and the
    host's receive and engine seconds. Train on an unshaped link (the transfer is modelled from
    the node's link at decision time). Prints the held-out errors. A node also learns online
    from the queries it serves (docs/dataservices.md)."""
    from offload.dataservices import particles as P
    from offload.dataservices import timemodel as TM
    from offload.dataservices import training as TR
    from offload.dataservices.client import NodeError

    counts, schema_counts = _row_counts(sizes, "--sizes"), _row_counts(schema_sizes, "--schema-sizes")
    if repeat < 1:
        raise fail(f"--repeat {repeat}: give at least 1 run")
    if suite not in ("particles", "generated", "all"):
        raise fail(f"--suite {suite!r}: give one of particles, generated, all")
    parts = ("particles", "generated") if suite == "all" else (suite,)
    total = len(counts) * queries * ("particles" in parts) + schemas * queries * ("generated" in parts)
    samples = []
    with _client(node, token_file, netns, timeout_s=900) as c:
        with failing(NodeError):
            st = c.status()
            system = st.get("system", "host")
            if (st.get("budget") or {}).get("link", {}).get("rate_mbit"):
                err.print("[yellow]the node's link is shaped: its stream times will include the link[/]")
            with progress(f"training on {system}", total=total) as steps:
                for i, n in enumerate(counts if "particles" in parts else []):
                    name = f"train_{n}"
                    steps(f"training on {system}: {n:,} particles")
                    c.upload(name, P.generate(n, seed=seed + i))
                    sqls = TR.training_queries(queries, seed + i)
                    samples += TR.measure(c, name, sqls, system, lambda _: steps.advance(), repeat)
                    c.drop(name)
                if "generated" in parts:
                    steps(f"training on {system}: {schemas} generated schemas")
                    done = steps.completed
                    seeds = range(seed, seed + schemas)
                    samples += TR.generated_samples(c, system, seeds, schema_counts, queries, repeat,
                                                    lambda k: steps.update(done + k))  # fmt: skip
    with failing(OSError, ValueError):
        old = TM.Models.load(out).samples if out.exists() else []
        TM.Models(old + samples).save(out)
    errors = TM.held_out_error(old + samples)
    doc = {"path": str(out.absolute()), "system": system, "samples_added": len(samples),
           "samples": len(old) + len(samples), "held_out_median_error": errors}  # fmt: skip
    if emit(doc, as_json):  # its --out is the training file
        return
    console.print(
        f"{len(samples)} samples from {system} and host added to {out} ({len(old) + len(samples)} in all)"
    )
    for k, v in sorted(errors.items()):
        console.print(f"  {k}: median error {100 * v:.1f}% on held-out queries")


def _row_counts(text: str, flag: str) -> list[int]:
    """Comma-separated row counts, at least one, each at least 1 (one-line error if not)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise fail(f"{flag} {text!r}: give row counts like 100000,400000")
    return counts


@app.command(name="case-study")
def case_study(
    node: NodeOpt = f"127.0.0.1:{DEFAULT_PORT}",
    rows: Annotated[
        int, typer.Option(min=1, max=10**9, help="Particles to load when the node has none.")
    ] = 6_177_731,
    repeat: Annotated[int, typer.Option(min=1, max=1_000, help="Runs of each way (medians are shown).")] = 3,
    out: OutOpt = None,
    token_file: TokenFileOpt = None,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The seed's Case I (0.9% selective) and Case II (18.4%, the crossover) on a node: its
    estimate and decision, both ways measured, the transfer sizes, beside the seed's figures.
    Loads `particles` (--rows) first if the node has no such data set."""
    from offload.dataservices import cases as C
    from offload.dataservices import particles as P
    from offload.dataservices.client import NodeError

    with _client(node, token_file, netns, timeout_s=900) as c:
        with failing(NodeError):
            if "particles" not in c.schemas():
                err.print(f"loading {rows:,} particles into the node")
                c.upload("particles", P.generate(rows))
            results = [C.run_case(c, name, repeat) for name in C.CASES]
    if emit(results, as_json, out):
        return
    print_cases(results)


ClusterOpt = Annotated[
    Path, typer.Option("--cluster", "-c", help="Cluster file (TOML: [nodes.NAME] endpoint, token_file).")
]


def _cluster(path: Path, netns: str | None) -> Any:
    from offload.dataservices.cluster import ClusterClient, load_cluster

    _enter_existing(netns)
    with failing(ValueError):
        return ClusterClient(load_cluster(path), timeout_s=900)


@app.command(name="cluster-load")
def cluster_load(
    name: Annotated[str, typer.Argument(help="Data set name on every node.")],
    cluster: ClusterOpt,
    file: Annotated[
        Path | None, typer.Option(help="Parquet/Arrow file to partition. \\[default: particles]")
    ] = None,
    rows: Annotated[
        int, typer.Option(min=1, max=10**9, help="Particles to generate when no --file is given.")
    ] = 6_177_731,
    by: Annotated[
        str | None,
        typer.Option(help="Integer column to partition by (modulo); a missing one: contiguous slices."),
    ] = "id",
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Partition a data set over the nodes of a cluster file."""
    from offload.dataservices import particles as P
    from offload.dataservices import tablefiles
    from offload.dataservices.client import NodeError

    with failing(ValueError):
        table = tablefiles.read(file.absolute()) if file else P.generate(rows)
    with _cluster(cluster, netns) as cc:
        with failing(NodeError, ValueError):
            parts = cc.upload_partitioned(name, table, by if by in table.schema.names else None)
    if emit({"name": name, "rows": parts}, as_json, out):
        return
    console.print(f"{name}: " + ", ".join(f"{n} {r:,} rows" for n, r in parts.items()))


@app.command(name="cluster-query")
def cluster_query(
    sql: Annotated[str, typer.Argument(help="SQL over the cluster's partitioned data sets.")],
    cluster: ClusterOpt,
    way: Annotated[
        str, typer.Option(help="offload, pushback, or auto (each node decides for its partition).")
    ] = "auto",
    show: Annotated[int, typer.Option(min=0, max=10**6, help="Result rows to print.")] = 5,
    netns: NetnsOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run a query over a cluster: every node gets the partition-local part of the plan (below
    its first aggregate, sort or limit) and decides for its partition; this host finishes."""
    from offload.dataservices.client import NodeError
    from offload.dataservices.plans import PlanError

    _way(way)
    with _cluster(cluster, netns) as cc:
        with failing(NodeError, PlanError, ValueError):
            result, timing = cc.query(sql, way)
    if emit({"sql": sql, "timing": timing.as_dict()}, as_json, out):
        return
    if show:
        console.print(result.slice(0, show).to_pandas().to_string(index=False))
    total, final = 1e3 * timing.total, 1e3 * timing.host_final
    t = compact_table(f"{timing.rows:,} rows in {total:.1f} ms (host final step {final:.1f} ms)")
    for col in ("node", "way", "rows", "node engine ms", "fetch ms", "host ms", "Arrow MiB"):
        t.add_column(col, justify="left" if col in ("node", "way") else "right")
    for n, d in timing.nodes.items():
        t.add_row(n, d["way"], f"{d['rows']:,}", f"{1e3 * d['node_engine']:.1f}", f"{1e3 * d['fetch']:.1f}",
                  f"{1e3 * d['host']:.1f}", f"{d['arrow_bytes'] / 2**20:.2f}")  # fmt: skip
    console.print(t)
    for n, d in timing.nodes.items():
        if d.get("decision"):
            why = _reason(d["way"], d["decision"].get("why", "no reason given"))
            console.print(f"{n}: chose {d['way']}: {escape(why)}")


@netns_app.command(name="list")
def netns_list(as_json: JsonOpt = False, out: OutOpt = None) -> None:
    """The namespaces this tool made (offload-*), with the processes inside each (`ip netns
    pids`; unknown without root). An idle one can go: `offload node netns rm NAME`."""
    from offload.host import links as L

    found = []
    for ns in L.namespaces():
        try:
            inside: list[int] | None = L.pids(ns)
        except OSError:
            inside = None
        found.append({"name": ns, "pids": inside, "idle": None if inside is None else not inside})
    if emit(found, as_json, out):
        return
    if not found:
        console.print(f"no namespaces of this tool ({L.PREFIX}*)")
        return
    t = compact_table("namespaces of this tool")
    for col in ("namespace", "processes", "pids"):
        t.add_column(col, justify="right" if col == "processes" else "left")
    for f in found:
        pids = f["pids"]
        shown = (
            ("unknown (needs root)", "-")
            if pids is None
            else (f"{len(pids)}", " ".join(map(str, pids)) or "-")
        )
        t.add_row(f["name"], *shown)
    console.print(t)


@netns_app.command(name="rm")
def netns_rm(
    name: Annotated[
        str | None, typer.Argument(help="NAME or offload-NAME (only this tool's). \\[default: none]")
    ] = None,
    all_idle: Annotated[
        bool, typer.Option("--all-idle", help="Remove every namespace of this tool with no process inside.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Remove NAME even with processes inside (they keep it until they end)."),
    ] = False,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Remove a namespace this tool made (offload-NAME), or every idle one (--all-idle). One with
    processes inside (a node still serving) is refused unless --force."""
    from offload.host import links as L

    if (name is None) == (not all_idle):
        raise fail("give a namespace NAME or --all-idle (one of the two)")
    why = L.unavailable_reason()
    if why:
        raise fail(f"netns rm: {why}")
    removed, kept = [], {}
    with failing(ValueError, OSError):
        if name is not None:
            ns = L.namespace_name(name)
            if not L.exists(ns):
                raise fail(f"no namespace {ns}; this tool's: {', '.join(L.namespaces()) or 'none'}")
            inside = L.pids(ns)
            if inside and not force:
                raise fail(f"{ns} has processes inside (pids {' '.join(map(str, inside))}): stop them, "
                           "or pass --force")  # fmt: skip
            L.remove_namespace(ns)
            removed.append(ns)
        for ns in L.namespaces() if all_idle else []:  # --force never applies to these
            inside = L.pids(ns)
            if inside:
                kept[ns] = inside
            else:
                L.remove_namespace(ns)
                removed.append(ns)
    if emit({"removed": removed, "kept": kept}, as_json, out):
        return
    for ns in removed:
        console.print(f"removed {ns}")
    for ns, pids in kept.items():
        console.print(f"kept {ns}: {len(pids)} process(es) inside")
    if not removed and not kept:
        console.print(f"no namespaces of this tool ({L.PREFIX}*)")


def print_cases(results: list[dict[str, Any]]) -> None:
    """The case studies side by side, the seed's figures in brackets."""
    t = compact_table(escape("the seed's case studies: ours [seed]"))
    t.add_column("")
    for r in results:
        t.add_column(f"Case {r['case']}", justify="right")

    def seed(r: dict[str, Any], key: str, fmt: str) -> str:
        v = r["seed"].get(key)
        return escape(f" [{fmt.format(v)}]") if v is not None else ""

    lines = [
        ("estimated rows", lambda r: f"{r['estimated_rows']:,.1f}" + seed(r, "estimated_rows", "{:,.1f}")),
        ("actual rows", lambda r: f"{r['actual_rows']:,}" + seed(r, "actual_rows", "{:,}")),
        (
            "estimate off by",
            lambda r: f"{100 * r['estimate_error']:.2f}%" + seed(r, "estimate_error", "{:.2%}"),
        ),
        ("decision", lambda r: r["decision"] + seed(r, "decision", "{}")),
        ("offload (ms)", lambda r: f"{1e3 * r['measured_s']['offload']:.1f}"),
        ("pushback (ms)", lambda r: f"{1e3 * r['measured_s']['pushback']:.1f}"),
        (
            "offload faster by",
            lambda r: f"{100 * r['offload_faster_by']:.1f}%" + seed(r, "offload_faster_by", "{:.1%}"),
        ),
        ("decision right", lambda r: "yes" if r["decision_right"] else "no"),
        ("offload MiB", lambda r: f"{r['transfer_mib']['offload']:.2f}"),
        ("pushback MiB", lambda r: f"{r['transfer_mib']['pushback']:.1f}"),
    ]
    for label, f in lines:
        t.add_row(label, *(f(r) for r in results))
    console.print(t)
    for r in results:
        console.print(f"Case {r['case']}: {r['why']}")
