"""`offload flows`: the seed's particle data flows — partition data by id under a node's budget,
sift it into id order, and see where the time goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from offload.clitools import (
    JsonOpt,
    OutOpt,
    choices,
    console,
    emit,
    enter_netns,
    fail,
    ints,
    oneline,
    progress,
)
from offload.clitools import compact_table as Table

if TYPE_CHECKING:
    from offload.clitools import Steps
    from offload.flows.pipeline import Validated
    from offload.flows.run import Nodes

app = typer.Typer(
    help="Particle data flows (seed 003): partition by id on a node profile, sift into id order, run the "
    "pipeline over nodes (run) and model it to 100 (model), and where compression pays. See docs/flows.md.",
    no_args_is_help=True,
)

DataSetsOpt = Annotated[str, typer.Option(help="Data sets, comma-separated: particles, airplanes, ships.")]
RowsOpt = Annotated[int, typer.Option(help="Rows of each data set.", min=1, max=1_000_000_000)]
PartsOpt = Annotated[int, typer.Option(help="Partitions by id, 2-16 (the seed's range).", min=2, max=16)]
WorkOpt = Annotated[Path, typer.Option(help="Where generated data sets are kept.")]


@app.command()
def partition(
    datasets: DataSetsOpt = "particles,airplanes,ships",
    rows: RowsOpt = 1_000_000,
    parts: PartsOpt = 8,
    codecs: Annotated[str, typer.Option(help="IPC codecs, comma-separated: none, lz4, zstd.")] = (
        "none,lz4,zstd"
    ),
    profiles: Annotated[
        str, typer.Option(help="Node budgets to run under, comma-separated: host, core, bluefield2.")
    ] = "core,bluefield2",
    work: WorkOpt = Path("build/flows"),
    plot: Annotated[
        Path | None, typer.Option(help="Write the breakdown as stacked bars here (.png). \\[default: none]")
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run the partition service (unpack, split by id, repack, compress) over each data set, in a
    process held to each node budget, and break its time down per step. Data sets are generated
    once under --work and reused; each producer message is 65,536 rows."""
    from offload.flows import datasets as D
    from offload.flows import partition as F
    from offload.host import budgets as B

    names = choices(datasets, tuple(D.DATASETS), "data set")
    profs = choices(profiles, tuple(B.PROFILES), "profile")
    cods = [None if c == "none" else c for c in choices(codecs, ("none", "lz4", "zstd"), "codec")]
    if not 2 <= parts <= 16 or rows < 1:
        raise fail(f"need 2-16 partitions and rows >= 1, got {parts} and {rows}")
    results = []
    with progress("partitioning", total=len(names) * len(profs) * len(cods)) as steps:
        for name in names:
            for prof in profs:
                for codec in cods:
                    steps(f"partitioning {name} on {prof} ({codec or 'none'})")
                    try:
                        results.append(F.partition_under(prof, name, rows, parts, codec, work))
                    except (RuntimeError, ValueError, OSError) as e:
                        raise fail(oneline(e)) from None
                    steps.advance()
    if plot is not None:
        F.plot_partition(results, plot)
    if emit(results, json_out, out):
        return
    print_partition(results)


@app.command()
def sift(
    datasets: DataSetsOpt = "particles,airplanes,ships",
    rows: RowsOpt = 1_000_000,
    parts: PartsOpt = 8,
    profiles: Annotated[
        str, typer.Option(help="Node budgets to run under, comma-separated: host, core, bluefield2.")
    ] = "core,bluefield2",
    memtable: Annotated[
        int, typer.Option(help="Rows a partition's memtable holds before a flush.", min=1)
    ] = 16_384,
    fanout: Annotated[
        int, typer.Option(help="Runs a level holds before they are compacted.", min=2, max=1024)
    ] = 4,
    work: WorkOpt = Path("build/flows"),
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run a node that partitions each data set by id and sifts every partition into an LSM tree
    (memtable, sorted runs, compaction), in a process held to each budget; then read everything
    back in (id, time) order. Shows the time of each part, the input rate through partition and
    merge, and the write amplification of the compactions."""
    from offload.flows import datasets as D
    from offload.flows import partition as F
    from offload.host import budgets as B

    names = choices(datasets, tuple(D.DATASETS), "data set")
    profs = choices(profiles, tuple(B.PROFILES), "profile")
    if not 2 <= parts <= 16 or rows < 1 or memtable < 1 or fanout < 2:
        got = f"{parts}, {rows}, {memtable}, {fanout}"
        raise fail(f"need 2-16 partitions, rows >= 1, memtable >= 1, fanout >= 2; got {got}")
    results = []
    with progress("sifting", total=len(names) * len(profs)) as steps:
        for name in names:
            for prof in profs:
                steps(f"sifting {name} on {prof}")
                try:
                    r = F.partition_under(prof, name, rows, parts, None, work, sift=(memtable, fanout))
                except (RuntimeError, ValueError, OSError) as e:
                    raise fail(oneline(e)) from None
                results.append(r)
                steps.advance()
    if emit(results, json_out, out):
        return
    _print_sift(results, f"{parts} partitions, memtables of {memtable:,} rows, fanout {fanout}")


@app.command()
def run(
    nodes: Annotated[
        str, typer.Option(help="Node counts to run, comma-separated (a scaling run).")
    ] = "1,2,4",
    dataset: Annotated[str, typer.Option(help="Data set: particles, airplanes or ships.")] = "particles",
    rows: Annotated[
        int, typer.Option(help="Rows in all (the producers share them).", min=1, max=1_000_000_000)
    ] = 1_000_000,
    parts: Annotated[
        int, typer.Option(help="Partitions by id, 2-16, at least one per node.", min=2, max=16)
    ] = 8,
    codec: Annotated[str, typer.Option(help="Codec of the forwarded partitions: none, lz4, zstd.")] = "none",
    profile: Annotated[
        str, typer.Option(help="Each node's budget: host, core or bluefield2 (a quarter core).")
    ] = "bluefield2",
    link: Annotated[
        str | None,
        typer.Option(
            help="Each node's link RATE[,DELAY], e.g. 1000mbit (runs in a namespace). \\[default: none]"
        ),
    ] = None,
    cpu_per_thread: Annotated[
        float | None,
        typer.Option(help="Each node's share of a core, 0-1. \\[default: the profile's]", min=0.01, max=1),
    ] = None,
    message_rows: Annotated[int, typer.Option(help="Rows per producer message.", min=1)] = 16_384,
    memtable: Annotated[
        int, typer.Option(help="Rows a partition's memtable holds before a flush.", min=1)
    ] = 65_536,
    cluster: Annotated[
        Path | None,
        typer.Option(
            help="Run on the nodes of this cluster file instead of starting them. \\[default: none]"
        ),
    ] = None,
    work: WorkOpt = Path("build/flows"),
    check: Annotated[
        bool, typer.Option(help="Compare the sorted read with a plain sort of the data.")
    ] = True,
    midway: Annotated[
        bool, typer.Option(help="Run the seed's two queries halfway through (they take node time).")
    ] = True,
    plot: Annotated[
        Path | None, typer.Option(help="Write the per-node breakdown as stacked bars here. \\[default: none]")
    ] = None,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run the particle pipeline over several nodes: producers (one per node, as simulation
    ranks) put packed messages to the nodes' partition services, which forward each partition
    east-west to the node that sifts it into an LSM tree. Each node is an `offload node serve`
    process with its own budget (and link, in a private namespace). Shows the input rate, where
    each node's time goes (unpack, split, repack, compress, transfer, merge), the seed's two
    queries midway and at the end, and where every row is. A lost node's rows are reported and
    kept in files, never dropped: the command then fails."""
    from offload.flows import datasets as D
    from offload.flows import run as R

    counts = [int(c) for c in choices(nodes, tuple(str(i) for i in range(1, 17)), "node count")]
    choices(dataset, tuple(D.DATASETS), "data set")
    choices(codec, ("none", "lz4", "zstd"), "codec")
    if not 2 <= parts <= 16 or max(counts) > parts or rows < 1 or message_rows < 1:
        raise fail(
            f"need 2-16 partitions, at least one per node, rows >= 1; got {parts} for {max(counts)} nodes"
        )
    if link is not None and cluster is None:
        enter_netns("flows")
    where = R.Nodes(profile, link, cpu_per_thread, cluster)
    # the work directory absolute: the nodes and the error messages get whole paths
    flow = dict(dataset=dataset, rows=rows, parts=parts, codec={"none": None}.get(codec, codec),
                message_rows=message_rows, memtable_rows=memtable, queries=midway,
                work=work.absolute())  # fmt: skip
    with progress(f"{counts[0]} node(s)", total=rows, every_step=True) as steps:  # a line per step in a log
        results = [_run_count(steps, n, where, check, flow) for n in counts]
    if plot is not None:
        R.plot_nodes(results, plot)
    if not emit(results, json_out, out):
        print_run(results)
    lost = [r for r in results if r["accounting"]["lost_nodes"] or not r["accounting"]["explained"]]
    if lost or any(r.get("matches_plain_sort") is False for r in results):
        raise fail("rows were lost or misplaced: see the accounting above")


def _run_count(steps: Steps, n: int, where: Nodes, check: bool, flow: dict[str, Any]) -> dict[str, Any]:
    """One node count of a scaling run (:func:`offload.flows.run.run_on`), the rows put as its
    progress."""
    from offload.flows import run as R

    steps.update(0, f"{n} node(s): starting the nodes and packing {flow['rows']:,} {flow['dataset']} rows")

    def rows_put(done: int, _: int) -> None:
        steps.update(done)

    try:
        r = R.run_on(n, where, check, progress=rows_put, **flow)
    except (RuntimeError, ValueError, OSError) as e:
        raise fail(oneline(e)) from None
    steps(f"{n} node(s): done in {r['wall_s']:.1f} s")
    return r


def print_run(results: list[dict]) -> None:
    """Steps as rows, runs as columns, so any number of steps fits 80 columns."""
    t = Table("particle pipeline: input rate, and each node's mean seconds by step")
    t.add_column("")
    for r in results:
        t.add_column(f"{r['nodes']} node{'s' if r['nodes'] > 1 else ''}", justify="right")
    steps = ("unpack_s", "split_s", "repack_s", "compress_s", "transfer_s", "merge_s")
    per = [[n["breakdown"] for n in r["per_node"].values()] for r in results]
    t.add_row("input MB/s", *(f"{1e3 * r['gb_per_s']:.1f}" for r in results))
    t.add_row("wall s", *(f"{r['wall_s']:.2f}" for r in results))
    for step in steps:
        t.add_row(
            f"{step.removesuffix('_s')} s", *(f"{sum(b[step] for b in p) / max(1, len(p)):.2f}" for p in per)
        )
    t.add_row("rows stored", *(f"{r['accounting']['stored']:,}" for r in results))
    t.add_row(
        "sorted right", *({True: "yes", False: "NO"}.get(r.get("matches_plain_sort"), "-") for r in results)
    )
    console.print(t)
    for r in results:
        said = [f"{when}: {q['box_rows']:,} rows in the 1/8 box, speed² up to {q['speed2_max'] or 0:.3g}"
                for when, q in (("midway", r.get("midway")), ("end", r["end"])) if q]  # fmt: skip
        console.print(f"{r['nodes']} node(s): " + "; ".join(said))
        a = r["accounting"]
        if a["lost_nodes"]:
            console.print(
                f"[red]lost {', '.join(a['lost_nodes'])}[/]: of {a['produced']:,} rows {a['stored']:,} are "
                f"stored, {a['kept']:,} kept in {', '.join(a['kept_in']) or 'no file'} (they may overlap: "
                f"sending them again is safe), {a['lost_with_nodes']:,} lost with the node(s), which could "
                f"have had {a['could_be_on_lost_nodes']:,} "
                f"({'explained' if a['explained'] else 'NOT explained'})"
            )


def _print_sift(results: list[dict], setup: str) -> None:
    t = Table(f"partition and sift: {setup}")
    names = ("data set", "profile")
    for col in (*names, "partition s", "merge s", "sorted read s", "MB/s", "write amp.", "rows"):
        t.add_column(col, justify="left" if col in names else "right")
    for r in results:
        secs = (f"{r[k]:.2f}" for k in ("total_s", "merge_s", "read_s"))
        rate, amp = f"{1e3 * r['sift_gb_per_s']:.1f}", f"{r['write_amplification']:.2f}"
        t.add_row(r["dataset"], r["profile"], *secs, rate, amp, f"{r['rows_sorted']:,}")
    console.print(t)
    for r in results:  # the seed's two queries, halfway through the arrivals and at the end
        said = [_queries(when, q) for when, q in r.get("queries", {}).items()]
        console.print(f"{r['dataset']} on {r['profile']}: " + "; ".join(said))


def _queries(when: str, q: dict) -> str:
    box = f"{q['box_rows']:,} of {q['rows_stored']:,} rows in the 1/8 box ({1e3 * q['box_s']:.0f} ms)"
    speed = f"speed² {q['speed2_min']:.3g}-{q['speed2_max']:.3g} ({1e3 * q['speed_s']:.0f} ms)"
    return f"{when}: {box}, {speed}"


def print_partition(results: list[dict]) -> None:
    t = Table("partition service: seconds per GB of input by step, their total, and output/input")
    names = ("data set", "profile", "codec")
    for col in (*names, "unpack", "split", "repack", "compress", "total", "out/in"):
        t.add_column(col, justify="left" if col in names else "right")
    for r in results:
        gb = r["bytes_in"] / 1e9 or 1.0
        t.add_row(
            r["dataset"], r["profile"], r["codec"],
            *(f"{r[k] / gb:.2f}" for k in ("unpack_s", "split_s", "repack_s", "compress_s")),
            f"{r['s_per_gb']:.2f}", f"{r['bytes_out'] / r['bytes_in']:.2f}",
        )  # fmt: skip
    console.print(t)
    base = {(r["dataset"], r["codec"]): r["s_per_gb"] for r in results if r["profile"] in ("core", "host")}
    for r in results:
        if r["profile"] not in ("core", "host") and (r["dataset"], r["codec"]) in base:
            ratio = r["s_per_gb"] / base[(r["dataset"], r["codec"])]
            console.print(f"{r['dataset']} {r['codec']}: {r['profile']} takes {ratio:.1f}x the host's time")


@app.command()
def model(
    runs: Annotated[
        Path, typer.Option(help="`offload flows run --json` output: runs over several node counts.")
    ],
    predict: Annotated[str, typer.Option(help="Node counts to predict, comma-separated.")] = "100",
    gb: Annotated[
        float,
        typer.Option(
            help="GB the predicted nodes share (the seed: 64M particles, about 4.1 GB).", min=0.000001
        ),
    ] = 4.1,
    fit_on: Annotated[
        str | None,
        typer.Option(
            help="Node counts to fit on, comma-separated. \\[default: the smallest and the middle one]"
        ),
    ] = None,
    link_gbit: Annotated[
        float | None,
        typer.Option(help="Each predicted node's link, Gbit/s. \\[default: the runs' profile's]", min=0.001),
    ] = None,
    message_mb: Annotated[
        float,
        typer.Option(
            help="MB per producer message in the predictions (0: the runs' size; the seed's ranks "
            "each put one dump of about 41 MB).",
            min=0,
        ),
    ] = 0.0,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Fit the particle pipeline model (docs/flows.md) to runs on a few nodes of this machine,
    show its error on every node count run (those it was not fitted on are the validation), and
    predict node counts one machine cannot hold, each node with its own cores (SmartNICs):

        offload flows run --nodes 1,2,4,8 --json > nodes.json
        offload flows model --runs nodes.json --predict 16,100
    """
    from offload.flows import pipeline as fm

    try:
        data = json.loads(runs.read_text())
        data = data["runs"] if isinstance(data, dict) else data
        v = fm.from_runs(
            data,
            ints(predict, minimum=1),
            gb,
            ints(fit_on, minimum=1) if fit_on else None,
            link_gbit,
            message_mb,
        )
    except (OSError, KeyError, IndexError, ValueError, TypeError) as ex:
        raise fail(f"{runs}: {ex}") from None
    if emit(v.as_dict(), as_json, out):
        return
    print_model(v)


def print_model(v: Validated) -> None:
    """A :class:`~offload.flows.pipeline.Validated`: the validation as a table, the fitted
    costs, and each prediction on a line."""
    m = v.model
    t = Table(f"particle pipeline on {v.profile} nodes ({m.share:g} core each) sharing {v.cores:g} cores")
    for col in ("nodes", "runs", "measured MB/s", "model MB/s", "error", "bound", "role"):
        t.add_column(col, justify="right")
    for c in v.checks:
        lo, hi = (1e3 * x for x in c["measured_range"])
        spread = f" ({lo:.1f}-{hi:.1f})" if c["repeats"] > 1 else ""
        rates = (f"{1e3 * c['measured_gb_per_s']:.1f}{spread}", f"{1e3 * c['predicted_gb_per_s']:.1f}")
        role = "fit" if c["fitted_on"] else "validation"
        t.add_row(str(c["nodes"]), str(c["repeats"]), *rates, f"{c['error']:+.1%}", c["bound"], role)
    console.print(t)
    console.print(
        f"model: {m.a:.1f} CPU s per GB partitioned and sifted, {1e3 * m.b:.2f} ms per east-west batch, "
        f"{m.o:.2f} s fixed; producers {m.producer:.1f} CPU s per GB"
    )
    link = f", {v.link_gbit:g} Gbit/s links" if v.link_gbit else ""
    for p in v.predictions:
        console.print(
            f"[bold]{p['nodes']} nodes[/] (own cores{link}, {p['message_mb']:.2g} MB messages): "
            f"{p['gb']:g} GB in {p['wall_s']:.2f} s = [bold]{p['gb_per_s']:.2f} GB/s[/] ({p['bound']}-bound)"
        )


@app.command()
def compression(
    results: Annotated[
        Path, typer.Option(help="Partition runs (`offload flows partition --json`, or the benchmark's).")
    ] = Path("benches/results/flows/partition.json"),
    profile: Annotated[str, typer.Option(help="The node budget whose runs to read.")] = "bluefield2",
    links: Annotated[str, typer.Option(help="Link rates, comma-separated (100mbit, 10gbit...).")] = (
        "100mbit,1gbit,10gbit,25gbit"
    ),
    engine: Annotated[
        str | None, typer.Option(help="A compression engine of the presets, or 'none'.")
    ] = "bitar_bluefield2",
    host: Annotated[
        str | None,
        typer.Option(
            help="The budget whose runs' decode times are the host reading the partitions, or 'none'."
        ),
    ] = "core",
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Where compression pays, per data set: each codec's seconds per GB of input when the node's
    partitioning, its link and the host reading the partitions back overlap, in software as
    measured and on a hardware engine (the
    compress step divided by the engine's published speed-up, lowest and highest); the link rate
    below which each pays; and the fastest way at each rate."""
    from offload.flows import compression as C
    from offload.host import budgets as B

    try:
        data = json.loads(results.read_text())
        runs = data["runs"] if isinstance(data, dict) else data
        rates = [B.Link.parse(x).rate_mbit for x in links.split(",")]
        if any(r is None for r in rates):
            raise ValueError("every link needs a rate")
        bps = [float(r) * 1e6 for r in rates if r is not None]
        eng, reader = (None if x in (None, "none") else x for x in (engine, host))
        by_dataset = C.table(C.ways(runs, profile, eng, reader), bps)
    except OSError as e:
        raise fail(f"{results}: {e.strerror}; make it with `offload flows partition --json > FILE`") from None
    except (ValueError, KeyError, TypeError) as e:
        raise fail(f"{results}: {e}") from None
    doc = {"profile": profile, "links_mbit": rates, "engine": engine, "host": host, "datasets": by_dataset}
    if emit(doc, json_out, out):
        return
    heads = [f"at {x}" for x in links.split(",")]
    for d in by_dataset:
        on = f"; engine: {engine}" if engine not in (None, "none") else ""
        t = Table(f"{d['dataset']} on {profile}: seconds per GB of input, node and link overlap{on}")
        for col in ("way", "node", "host", "out/in", "pays below Mbit/s", *heads):
            t.add_column(col, justify="left" if col == "way" else "right")
        for w in d["ways"]:
            cell = _pays(w["pays_below_mbit"])
            secs = (f"{w[k]:.2f}" for k in ("node_s_per_gb", "host_s_per_gb", "out_over_in"))
            t.add_row(w["way"], *secs, cell,
                      *(f"{s:.2f}" for s in w["s_per_gb"]))  # fmt: skip
        t.add_row("[bold]fastest[/]", "", "", "", "", *d["best"])
        console.print(t)
    if reader and not any(w["host_s_per_gb"] for d in by_dataset for w in d["ways"]):
        console.print(
            f"[yellow]the runs on {reader} do not say what reading costs (decode_s): host taken as free[/]"
        )


@app.command("gpu-codec")
def gpu_codec(
    datasets: DataSetsOpt = "particles,airplanes,ships",
    rows: RowsOpt = 1_000_000,
    repeats: Annotated[int, typer.Option(help="Timed repeats; the median is kept.", min=1, max=1000)] = 3,
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Compress each data set's column buffers on a GPU with nvCOMP (LZ4, Zstd, Cascaded),
    transfers included, and check that they decode to the same bytes; beside it, what Arrow's
    lz4 and zstd make of the same table here. Needs an NVIDIA GPU and `pip install
    nvidia-nvcomp-cu12` (or -cu13): without them it says which is missing and stops. Wrong bytes
    back are reported per algorithm and exit 1."""
    from offload.flows import datasets as D
    from offload.flows import gpucodec as G
    from offload.flows import partition as F

    names = choices(datasets, tuple(D.DATASETS), "data set")
    why = G.unavailable_reason()
    if why is not None:
        raise fail(f"no GPU codec here: {why}")
    results = {}
    for name in names:
        table = D.dataset(name).generate(rows, 0)
        try:
            results[name] = G.measure(table, repeats=repeats)
        except RuntimeError as e:
            raise fail(f"{name}: {e}") from None
        results[name]["arrow_out_over_in"] = {
            c: len(F.pack(table, c)) / len(F.pack(table)) for c in ("lz4", "zstd")
        }
    failed = [f"{n} {a}" for n, r in results.items() for a, got in r["algorithms"].items() if "failed" in got]
    if emit(results, json_out, out) and not failed:
        return
    t = Table("nvCOMP on the GPU (GB/s of column buffers): transfers included, and on device memory alone")
    cols = ("data set", "algorithm", "compress", "decompress", "on device: compress", "decompress", "out/in")
    for col in cols:
        t.add_column(col, justify="left" if col in ("data set", "algorithm") else "right")
    for name, r in results.items():
        for algo, a in r["algorithms"].items():
            if "failed" in a:
                t.add_row(name, algo, "[red]wrong bytes back[/red]", a["failed"], "", "", "")
                continue
            dev = [f"{a[f'on_device_{k}_gb_per_s']:.1f}" if f"on_device_{k}_gb_per_s" in a else "—"
                   for k in ("compress", "decompress")]  # fmt: skip
            t.add_row(name, algo, f"{a['compress_gb_per_s']:.2f}", f"{a['decompress_gb_per_s']:.2f}", *dev,
                      f"{a['out_over_in']:.2f}")  # fmt: skip
    if not json_out:
        console.print(t)
    if failed:
        raise fail(f"did not give the bytes back: {', '.join(failed)} (the JSON says where)", code=1)


def _pays(below: float | None) -> str:
    if below is None:
        return "—"
    if below == float("inf"):
        return "always"
    return "never" if below == 0 else f"{below:,.0f}"
