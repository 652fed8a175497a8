"""Relative data availability of embedded storage nodes against general-purpose servers (seed 003,
slides 53-58; the HotEdge'20 paper "Scale-out edge storage systems with embedded storage nodes to get
better availability and cost-efficiency at the same time", Liu, Curry, Maltzahn, Kufeldt).

The seed's formulas were images; this model is rebuilt from its stated assumptions:

* both systems keep 3 replicas of every chunk on copysets (Cidon et al., "Copysets", USENIX ATC'13)
  with scatter width w = 4;
* node failures are independent, so their number in a window is Poisson;
* a server aggregates ``c`` compute units and ``n`` storage devices, an embedded node one of each. A
  device fails ``f`` times as often as a compute unit (HDD f = 2, SSD f = 0.06: the seed's figures).
  A server's copysets lose their replica on it when its compute or any of its devices fails (chunks
  lie on any of its devices), so it fails at ``c + n·f`` compute-unit rates; an embedded node at
  ``1 + f``. The embedded system replaces each of the ``m`` servers by ``c`` nodes.

The relative benefit is P(data loss, servers) / P(data loss, embedded): above 1 embedded is better.
Rates are in units of one compute unit's failure rate λ; ``window`` is λ·T, the expected failures of
one compute unit during the exposure window T. No source gives T, so the default is the rare-failure
limit (T → 0), where the ratio no longer depends on it. docs/metrics.md says which of the seed's
figures this reproduces (20.7) and which not (7.1, 114.3), and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from offload.files import save_figure
from offload.host.plots import pyplot

REPLICAS = 3  # the seed: 3-way replication
SCATTER_WIDTH = 4  # the seed: w = 4, after [cidon2013]
SERVERS = 10  # the seed: m = 10 servers
HDD_F = 2.0  # spinning media [vishwanath2010]
SSD_F = 0.06  # solid-state drives [xu2019lessons]

FPer = Literal["compute-unit", "server"]
F_PER: tuple[str, ...] = ("compute-unit", "server")


@dataclass(frozen=True)
class Case:
    """One of the seed's evaluated configurations, with the benefit it published."""

    name: str
    n: int  # storage aggregation: devices per server
    c: int  # compute aggregation: embedded nodes per server
    f: float  # device failure rate over a compute unit's
    published: float


SEED_CASES: tuple[Case, ...] = (
    Case("slide 58, HDD", 4, 4, HDD_F, 7.1),
    Case("slide 52, SSD", 4, 4, SSD_F, 20.7),
    Case("slide 58, HDD", 12, 17, HDD_F, 114.3),
)


def case_from_text(text: str, name: str = "case") -> Case:
    """A configuration written ``n,c,f`` (as ``--case 12,17,2``), with no published figure."""
    try:
        n, c, f = text.split(",")
        return Case(name, int(n), int(c), float(f), 0.0)
    except ValueError:
        raise ValueError(f"{name} {text!r}: expected n,c,f such as 12,17,2") from None


def _check_layout(nodes: int, scatter_width: int, replicas: int) -> None:
    """A copyset layout needs ≥ 2 replicas, a scatter width made of whole permutations (w/(R-1) of
    them) and enough nodes for each one to have w distinct peers."""
    if replicas < 2:
        raise ValueError(f"replicas must be at least 2, got {replicas}")
    if scatter_width < replicas - 1 or scatter_width % (replicas - 1):
        raise ValueError(
            f"scatter width must be a positive multiple of replicas - 1 = {replicas - 1}, got {scatter_width}"
        )
    if nodes < replicas or nodes - 1 < scatter_width:
        raise ValueError(
            f"{nodes} nodes cannot hold copysets of {replicas} with scatter width {scatter_width} "
            f"(need at least {max(replicas, scatter_width + 1)})"
        )


def copysets(nodes: int, scatter_width: int = SCATTER_WIDTH, replicas: int = REPLICAS) -> float:
    """Copysets of a minimal layout: w/(R-1) permutations, each cut into N/R groups (Cidon et al. §4),
    so every node is in w/(R-1) copysets. The count is N·w/(R·(R-1)), fractional where R does not
    divide N: it is the average over layouts that keep every node's scatter width at w."""
    _check_layout(nodes, scatter_width, replicas)
    return nodes * scatter_width / (replicas * (replicas - 1))


def loss_given_failures(
    nodes: int, failed: int, scatter_width: int = SCATTER_WIDTH, replicas: int = REPLICAS
) -> float:
    """P(some copyset lies wholly among ``failed`` distinct failed nodes, chosen uniformly).

    By linearity the expected number of lost copysets is exactly #copysets·C(k,R)/C(N,R); the
    probability is that, capped at 1 (the union bound). On a layout where every node's scatter width
    is w, copysets share at most one node, so two of them span 2R-1 nodes and up to 2R-2 failures
    hold at most one: there it is exact. Beyond, it is an upper bound (and the count an average, see
    :func:`copysets`); every node failed loses everything."""
    _check_layout(nodes, scatter_width, replicas)
    if failed < 0:
        raise ValueError(f"failed nodes must be >= 0, got {failed}")
    if failed >= nodes:
        return 1.0
    if failed < replicas:
        return 0.0
    expected = (
        copysets(nodes, scatter_width, replicas) * math.comb(failed, replicas) / math.comb(nodes, replicas)
    )
    return min(1.0, expected)


def node_rates(n: int, c: int, f: float, f_per: FPer = "compute-unit") -> tuple[float, float]:
    """(server, embedded node) failure rates in compute-unit rates: c + n·f and 1 + f.

    ``f_per="server"`` reads f as a device's rate over a whole server's non-storage part instead
    (the other reading of the seed's "storage over non-storage components"); a compute unit then
    fails 1/c as often as that part, so in compute units f becomes c·f."""
    _check_aggregation(n, c, f)
    if f_per not in F_PER:
        raise ValueError(f"f_per must be one of {', '.join(F_PER)}, got {f_per!r}")
    unit_f = f * c if f_per == "server" else f
    return c + n * unit_f, 1.0 + unit_f


def _check_aggregation(n: int, c: int, f: float) -> None:
    if n < 1 or c < 1:
        raise ValueError(f"storage aggregation n and compute aggregation c must be >= 1, got n={n}, c={c}")
    if not (math.isfinite(f) and f >= 0):
        raise ValueError(f"failure-rate ratio f must be a finite number >= 0, got {f}")


def _check_window(window: float | None) -> None:
    if window is not None and not (math.isfinite(window) and window > 0):
        raise ValueError(f"window (expected compute-unit failures in it) must be > 0, got {window}")


def _poisson_pmf(k: int, mean: float) -> float:
    return math.exp(k * math.log(mean) - mean - math.lgamma(k + 1))


def loss_probability(
    nodes: int,
    rate: float,
    window: float,
    scatter_width: int = SCATTER_WIDTH,
    replicas: int = REPLICAS,
) -> float:
    """P(data loss) in a window: the failures K among ``nodes`` nodes of failure rate ``rate`` are
    Poisson with mean N·rate·window, and K = k loses data with :func:`loss_given_failures`. K ≥ N
    counts as all nodes failed. Summed as losses, with the tail term by term, while losses are rare
    and K < N likely (1 - P(K < N) would cancel); otherwise as 1 - P(no loss), which is then exact
    to rounding where a long sum of near-1 terms would not be."""
    _check_layout(nodes, scatter_width, replicas)
    _check_window(window)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"node failure rate must be > 0, got {rate}")
    mean = nodes * rate * window
    losses = [loss_given_failures(nodes, k, scatter_width, replicas) for k in range(nodes)]
    pmf = [_poisson_pmf(k, mean) for k in range(nodes)]
    p = sum(q * loss for q, loss in zip(pmf, losses, strict=True))
    if p > 0.5 or sum(pmf) < 0.5:  # losses likely, or most failures in the tail K >= N
        return max(0.0, 1.0 - sum(q * (1.0 - loss) for q, loss in zip(pmf, losses, strict=True)))
    k, tail = nodes, 0.0
    while True:
        term = _poisson_pmf(k, mean)
        tail += term
        if k > mean and term <= 1e-17 * tail:
            break
        k += 1
    return min(1.0, p + tail)


def loss_coefficient(
    nodes: int, rate: float, scatter_width: int = SCATTER_WIDTH, replicas: int = REPLICAS
) -> float:
    """The rare-failure limit of :func:`loss_probability`: P → a·window^R with
    a = (N·rate)^R / R! · #copysets / C(N,R), from P(K = R) alone (larger K are higher powers)."""
    _check_layout(nodes, scatter_width, replicas)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"node failure rate must be > 0, got {rate}")
    return (
        (nodes * rate) ** replicas
        / math.factorial(replicas)
        * copysets(nodes, scatter_width, replicas)
        / math.comb(nodes, replicas)
    )


def relative_benefit(
    n: int,
    c: int,
    f: float,
    *,
    servers: int = SERVERS,
    window: float | None = None,
    scatter_width: int = SCATTER_WIDTH,
    replicas: int = REPLICAS,
    f_per: FPer = "compute-unit",
) -> float:
    """P(data loss, m servers) / P(data loss, m·c embedded nodes); ``window=None`` is the rare-failure
    limit, the ratio of :func:`loss_coefficient` (the window cancels there)."""
    _check_window(window)
    rate_s, rate_e = node_rates(n, c, f, f_per)
    embedded = servers * c
    if window is None:
        return loss_coefficient(servers, rate_s, scatter_width, replicas) / loss_coefficient(
            embedded, rate_e, scatter_width, replicas
        )
    return loss_probability(servers, rate_s, window, scatter_width, replicas) / loss_probability(
        embedded, rate_e, window, scatter_width, replicas
    )


def report(
    cases: Sequence[Case] = SEED_CASES,
    *,
    servers: int = SERVERS,
    window: float | None = None,
    scatter_width: int = SCATTER_WIDTH,
    replicas: int = REPLICAS,
    f_per: FPer = "compute-unit",
) -> dict[str, Any]:
    """The model's benefit for each case beside the figure the seed published (0 where none)."""
    rows = []
    for k in cases:
        rate_s, rate_e = node_rates(k.n, k.c, k.f, f_per)
        kw: dict[str, Any] = {"servers": servers, "scatter_width": scatter_width, "replicas": replicas}
        row: dict[str, Any] = {
            "case": k.name,
            "n": k.n,
            "c": k.c,
            "f": k.f,
            "servers": servers,
            "server_devices": servers * k.n,
            "embedded_nodes": servers * k.c,
            "server_rate": rate_s,
            "embedded_rate": rate_e,
            "benefit_rare_limit": relative_benefit(k.n, k.c, k.f, f_per=f_per, **kw),
            "published": k.published or None,
        }
        if window is not None:
            row["benefit_window"] = relative_benefit(k.n, k.c, k.f, window=window, f_per=f_per, **kw)
            row["p_loss_servers"] = loss_probability(servers, rate_s, window, scatter_width, replicas)
            row["p_loss_embedded"] = loss_probability(servers * k.c, rate_e, window, scatter_width, replicas)
        rows.append(row)
    return {
        "model": "copysets (Cidon et al. ATC'13) with Poisson failures; server rate c + n·f, embedded 1 + f",
        "replicas": replicas,
        "scatter_width": scatter_width,
        "window": window,
        "f_per": f_per,
        "cases": rows,
    }


def plot(
    path: Path,
    *,
    servers: int = SERVERS,
    window: float | None = None,
    scatter_width: int = SCATTER_WIDTH,
    replicas: int = REPLICAS,
    f_per: FPer = "compute-unit",
) -> None:
    """Three panels of the benefit (log scale): over storage aggregation n at c = 4, over compute
    aggregation c at n = 4 and 12, and over the failure-rate ratio f; the seed's published points
    are drawn hollow where they belong. With a window, its curves are dashed beside the limit's."""
    plt = pyplot()
    kw: dict[str, Any] = {
        "servers": servers,
        "scatter_width": scatter_width,
        "replicas": replicas,
        "f_per": f_per,
    }
    windows: list[float | None] = [None] if window is None else [None, window]

    def curve(ax: Any, xs: Sequence[float], point: Any, label: str, color: str) -> None:
        for w in windows:
            ys = [relative_benefit(*point(x), window=w, **kw) for x in xs]
            ax.plot(xs, ys, color=color, ls="-" if w is None else "--", label=label if w is None else None)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    _curves(axes, curve)
    _seed_points(axes)
    when = (
        "rare-failure limit"
        if window is None
        else f"solid: rare-failure limit, dashed: window λT = {window:g}"
    )
    fig.suptitle(
        f"relative data availability of embedded storage, m = {servers} servers, R = {replicas}, "
        f"w = {scatter_width} ({when}); hollow: the seed's published figures"
    )
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.12, top=0.9, wspace=0.25)
    save_figure(fig, Path(path))


def _curves(axes: Any, curve: Callable[..., None]) -> None:
    """The benefit over n (c = 4), over c (n = 4 and 12) and over f, HDD and SSD."""
    ns = list(range(1, 25))
    ax = axes[0]
    for f, name, color in ((HDD_F, "HDD", "C0"), (SSD_F, "SSD", "C1")):
        curve(ax, ns, lambda x, f=f: (int(x), 4, f), f"{name} (f = {f:g}), c = 4", color)
    ax.set_xlabel("storage aggregation n (devices per server)")
    ax = axes[1]
    for n, f, name, color in (
        (4, HDD_F, "HDD", "C0"),
        (4, SSD_F, "SSD", "C1"),
        (12, HDD_F, "HDD", "C2"),
        (12, SSD_F, "SSD", "C3"),
    ):
        curve(ax, ns, lambda x, n=n, f=f: (n, int(x), f), f"{name}, n = {n}", color)
    ax.set_xlabel("compute aggregation c (embedded nodes per server)")
    ax = axes[2]
    fs = [10 ** (e / 20) for e in range(-50, 21)]
    for n, c, color in ((4, 4, "C0"), (12, 12, "C2"), (12, 17, "C3")):
        curve(ax, fs, lambda x, n=n, c=c: (n, c, x), f"n = {n}, c = {c}", color)
    ax.set_xscale("log")
    ax.set_xlabel("failure-rate ratio f (device over compute unit)")


def _seed_points(axes: Any) -> None:
    """The seed's published figures, hollow, on every panel they belong to; the shared axes."""
    for k in SEED_CASES:
        spots = [(axes[2], k.f)]
        if k.c == 4:
            spots.append((axes[0], k.n))
        if k.f == HDD_F and k.n == 12:
            spots.append((axes[1], k.c))
        for a, x in spots:
            a.scatter([x], [k.published], facecolors="none", edgecolors="black", zorder=3)
            a.annotate(f"seed {k.published:g}", (x, k.published), textcoords="offset points", xytext=(5, -12))
    for a in axes:
        a.set_yscale("log")
        a.axhline(1.0, color="black", lw=0.8)
        a.set_ylabel("P(loss, servers) ÷ P(loss, embedded)")
        a.legend(fontsize=8)
        a.grid(True, which="major", alpha=0.3)


# ------------------------------------------------------------------ the candidates for slide 58
#
# Which model gives all three of the seed's figures (7.1, 20.7, 114.3)? Each candidate below is a
# standard way to compute P(data loss); `candidates` evaluates every one on the seed's cases, in
# its parameter-free limit and at the value of its free parameter that comes closest to all three
# at once. Rates are in compute-unit failure rates, as above (`node_rates`).

MODELS: tuple[str, ...] = ("copysets-poisson", "cidon-copyset", "cidon-random", "markov-repair", "correlated")
REPAIR: tuple[str, ...] = ("equal", "by-data", "by-compute")
"""How fast a server is repaired against an embedded node (``markov-repair``): ``equal``; ``by-data``
(a server holds n devices' data, so 1/n as fast); ``by-compute`` (that, rebuilt with c compute units:
c/n as fast)."""


def independent_loss(p: float, copysets_: float, replicas: int = REPLICAS) -> float:
    """Cidon et al.'s probability of data loss with copyset replication, nodes failing independently
    with probability ``p`` each: a copyset is lost when its R nodes all fail, and the K copysets are
    taken as independent, so P = 1 - (1 - p^R)^K (computed without cancellation)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a node's failure probability must be in [0, 1], got {p}")
    if p == 1.0:
        return 1.0
    return -math.expm1(copysets_ * math.log1p(-(p**replicas)))


def random_replication_loss(nodes: int, p: float, replicas: int = REPLICAS) -> float:
    """Cidon et al.'s random replication with many chunks per node: every R-set of nodes holds some
    chunk, so data is lost as soon as any R nodes fail: P(Binomial(N, p) >= R)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a node's failure probability must be in [0, 1], got {p}")
    return min(
        1.0, sum(math.comb(nodes, k) * p**k * (1 - p) ** (nodes - k) for k in range(replicas, nodes + 1))
    )


def copyset_mttdl(rate: float, repair: float, replicas: int = REPLICAS) -> float:
    """Mean time to data loss of one copyset as a Markov chain with repair: with i of its R nodes
    failed, another fails at (R - i)·rate and each failed one is rebuilt at ``repair`` (i·repair in
    all); R failed is data loss. The expected times to absorption T_i solve
    (up_i + down_i)·T_i = 1 + up_i·T_{i+1} + down_i·T_{i-1}, T_R = 0; returned is T_0."""
    if not (rate > 0 and repair >= 0 and math.isfinite(rate) and math.isfinite(repair)):
        raise ValueError(f"need a failure rate > 0 and a repair rate >= 0, got {rate} and {repair}")
    # T_i = a_i + b_i·T_{i+1}, forward from i = 0 (no down step there); T_R = 0 closes it
    a, b = 1.0 / (replicas * rate), 1.0
    coefs = [(a, b)]
    for i in range(1, replicas):
        up, down = (replicas - i) * rate, i * repair
        denom = up + down - down * b
        a, b = (1.0 + down * a) / denom, up / denom
        coefs.append((a, b))
    t = 0.0
    for a, b in reversed(coefs):
        t = a + b * t
    return t


def correlated_coefficient(
    servers: int, n: int, compute_rate: float, device_rate: float, scatter_width: int = SCATTER_WIDTH
) -> float:
    """P(data loss) / T^3 as T → 0 for servers whose failures are not whole-node: a server's compute
    fails at ``compute_rate`` and takes its n devices, a device fails at ``device_rate`` alone. Server
    copysets as above; each carries n device copysets, device j of each of its three servers. The
    minimal sets of three failures that lose a device copyset are, per server copyset: the three
    computes (a³); two computes and any device of the third server (3·n·a²f); one compute and the
    other two servers' devices j (3·n·a·f²); the three devices j (n·f³). Copysets share at most one
    server, so no set is counted twice. R = 3."""
    a, f = compute_rate, device_rate
    per_copyset = a**3 + 3 * n * a * a * f + 3 * n * a * f * f + n * f**3
    return copysets(servers, scatter_width, 3) * per_copyset


def _rates(k: Case, f_per: FPer) -> tuple[float, float, float]:
    """(server compute rate, device rate, embedded node rate) in compute-unit rates."""
    unit_f = node_rates(k.n, k.c, k.f, f_per)[1] - 1.0
    return float(k.c), unit_f, 1.0 + unit_f


def candidate_benefit(
    model: str,
    k: Case,
    param: float | None = None,
    *,
    servers: int = SERVERS,
    f_per: FPer = "compute-unit",
    repair: str = "equal",
) -> float:
    """P(loss, servers) / P(loss, embedded) of one case under one candidate ``model`` (:data:`MODELS`).
    ``param`` is its free parameter, None for its limit: the exposure λT for ``copysets-poisson``,
    ``cidon-copyset`` and ``cidon-random``, λ/μ (a compute unit's failure rate over an embedded
    node's repair rate) for ``markov-repair``; ``correlated`` has none (its rare-failure limit)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; one of {', '.join(MODELS)}")
    if repair not in REPAIR:
        raise ValueError(f"unknown repair {repair!r}; one of {', '.join(REPAIR)}")
    if param is not None and not (math.isfinite(param) and param > 0):
        raise ValueError(f"the model's parameter must be > 0, got {param}")
    emb = servers * k.c
    r_s, r_e = node_rates(k.n, k.c, k.f, f_per)
    if model == "copysets-poisson":
        return relative_benefit(k.n, k.c, k.f, servers=servers, window=param, f_per=f_per)
    ks, ke = copysets(servers), copysets(emb)
    if model == "cidon-copyset":
        if param is None:
            return ks * r_s**3 / (ke * r_e**3)
        return independent_loss(-math.expm1(-r_s * param), ks) / independent_loss(
            -math.expm1(-r_e * param), ke
        )
    if model == "cidon-random":
        if param is None:
            return math.comb(servers, 3) * r_s**3 / (math.comb(emb, 3) * r_e**3)
        ps, pe = -math.expm1(-r_s * param), -math.expm1(-r_e * param)
        return random_replication_loss(servers, ps) / random_replication_loss(emb, pe)
    if model == "markov-repair":
        slow = {"equal": 1.0, "by-data": 1.0 / k.n, "by-compute": k.c / k.n}[repair]
        if param is None:  # MTTDL ∝ μ²/λ³ as λ/μ → 0, so the ratio is (r_s/r_e)³·(μ_e/μ_s)²
            return ks * r_s**3 / (ke * r_e**3 * slow**2)
        return (ks / copyset_mttdl(r_s * param, slow)) / (ke / copyset_mttdl(r_e * param, 1.0))
    if param is not None:
        raise ValueError("the correlated model has no free parameter (its rare-failure limit)")
    a, f, e = _rates(k, f_per)
    return correlated_coefficient(servers, k.n, a, f) / (ke * e**3)


FREE: dict[str, str | None] = {
    "copysets-poisson": "λT",
    "cidon-copyset": "λT",
    "cidon-random": "λT",
    "markov-repair": "λ/μ",
    "correlated": None,
}


def _worst(values: Sequence[float], cases: Sequence[Case]) -> float:
    """The largest |ln(model / seed)| over the cases: a factor, symmetric above and below."""
    return max(
        abs(math.log(v / k.published)) if v > 0 else math.inf for v, k in zip(values, cases, strict=True)
    )


def closest(
    model: str,
    cases: Sequence[Case] = SEED_CASES,
    lo: float = 1e-6,
    hi: float = 10.0,
    points: int = 561,
    **kw: Any,
) -> tuple[float, list[float]]:
    """The parameter on a log grid from ``lo`` to ``hi`` (refined around the best point) at which
    the model's figures come closest to all published ones at once (smallest worst-case factor),
    and those figures. A search of its one free parameter, to show how close the model can come."""

    def at(x: float) -> list[float]:
        return [candidate_benefit(model, k, x, **kw) for k in cases]

    step = (math.log(hi) - math.log(lo)) / (points - 1)
    grid = [math.exp(math.log(lo) + i * step) for i in range(points)]
    best = min(grid, key=lambda x: _worst(at(x), cases))
    fine = [best * math.exp(step * (j / 20 - 1)) for j in range(41)]
    best = min(fine, key=lambda x: _worst(at(x), cases))
    return best, at(best)


def candidates(
    cases: Sequence[Case] = SEED_CASES, *, servers: int = SERVERS, tolerance: float = 0.01
) -> dict[str, Any]:
    """Every candidate (and variant: f's two readings, markov-repair's repair rules) on the seed's
    cases: its limit, and its free parameter's closest joint fit, against the published figures.
    ``matches`` is whether one setting gives every figure within ``tolerance``."""
    rows = []
    for model in MODELS:
        for f_per in F_PER:
            for repair in REPAIR if model == "markov-repair" else ("equal",):
                per: FPer = "server" if f_per == "server" else "compute-unit"
                kw: dict[str, Any] = {"servers": servers, "f_per": per, "repair": repair}
                limit = [candidate_benefit(model, k, None, **kw) for k in cases]
                row: dict[str, Any] = {
                    "model": model,
                    "f_per": f_per,
                    "repair": repair if model == "markov-repair" else None,
                    "free": FREE[model],
                    "limit": limit,
                    "limit_worst_factor": math.exp(_worst(limit, cases)),
                }
                best = limit
                if FREE[model]:
                    x, best = closest(model, cases, **kw)
                    row |= {
                        "closest_param": x,
                        "closest": best,
                        "closest_worst_factor": math.exp(_worst(best, cases)),
                    }
                row["matches"] = any(
                    all(abs(v / k.published - 1) <= tolerance for v, k in zip(vals, cases, strict=True))
                    for vals in (limit, best)
                )
                rows.append(row)
    return {
        "cases": [{"case": k.name, "n": k.n, "c": k.c, "f": k.f, "published": k.published} for k in cases],
        "servers": servers,
        "replicas": REPLICAS,
        "scatter_width": SCATTER_WIDTH,
        "tolerance": tolerance,
        "models": rows,
        "any_matches": any(r["matches"] for r in rows),
    }
