"""A schema as a new user brings one, unlike any the training suite generates (issue 45): customers,
their orders and the orders' shipments, with strings (names, cities, free-text notes, tracking
codes), a date kept as text (``odate``, cast where it is compared), decimals, and joins of two
large tables (orders and shipments) as well as of a large one with a mid-sized one (customers).

The training suite's schemas (``offload.dataservices.workload``) have one fact table joined to
a 1,000-row dimension; here the smallest join side has an eighth of the orders' rows, and
shipments has as many as orders. Its queries are the operators the issue saw mispredicted:
LIKE on strings, GROUP BY on string keys, hash joins, and dates.

    from newuser_orders import tables, queries
    tables(400_000, seed=7)          # {"customers": ..., "orders": ..., "shipments": ...}
    queries(16, seed=0)              # [(kind, sql), ...]; other seeds: other literals
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WORDS = ("late", "fragile", "gift", "express", "return", "damaged", "priority", "bulk", "holiday",
          "sample", "refund",
          "partial", "signature", "weekend", "office", "warehouse", "customs", "pickup")  # fmt: skip
CITIES = tuple(f"{a}{b}" for a in ("Ber", "Par", "Mad", "Ros", "Lis", "Dub", "Osl", "Vie", "Pra", "Bud",
                                   "War", "Zag", "Sof", "Riga", "Tal", "Hel")
               for b in ("lin", "is", "rid", "ton", "bon", "ville", "burg", "grad", "dorf", "mouth",
                         "haven", "field"))  # fmt: skip
STATUSES = ("delivered", "shipped", "pending", "cancelled", "returned", "on hold")
CARRIERS = ("PostNord", "DHL Express", "UPS", "FedEx", "GLS", "DPD", "Hermes", "Chronopost", "Correos")
_STATUS_SHARES = (0.55, 0.2, 0.1, 0.07, 0.05, 0.03)
SEGMENTS = ("consumer", "small business", "enterprise", "public sector")
FIRST_DAY = dt.date(2015, 1, 1)
DAYS = 3650


def tables(orders: int, seed: int = 7) -> dict[str, pa.Table]:
    """The three tables: ``orders`` orders, an eighth as many customers, a shipment per order."""
    rng = np.random.default_rng([seed, 45])
    n_cust = max(1, orders // 8)
    customers = pa.table({
        "customer_id": pa.array(np.arange(n_cust, dtype=np.int64)),
        "name": _names(rng, n_cust),
        "city": pa.array(CITIES).take(rng.zipf(1.3, n_cust) % len(CITIES)),
        "segment": pa.array(SEGMENTS).take(rng.choice(len(SEGMENTS), n_cust, p=[0.6, 0.25, 0.1, 0.05])),
        "signup": pa.array((rng.integers(0, DAYS, n_cust) + _day0()).astype(np.int32), pa.date32()),
    })  # fmt: skip
    days = rng.integers(0, DAYS, orders)
    odate = pc.strftime(pa.array((days + _day0()).astype(np.int32), pa.date32()).cast(pa.timestamp("s")),
                        "%Y-%m-%d")  # fmt: skip
    cents = np.round(rng.lognormal(3.5, 1.0, orders) * 100).astype(np.int64)
    orders_t = pa.table({
        "order_id": pa.array(np.arange(orders, dtype=np.int64)),
        "customer_id": pa.array((rng.zipf(1.2, orders) * 7919 % n_cust).astype(np.int64)),
        "odate": odate,
        "status": pa.array(STATUSES).take(rng.choice(len(STATUSES), orders, p=_STATUS_SHARES)),
        "amount": pc.cast(pa.array(cents / 100.0), pa.decimal128(14, 2), safe=False),
        "note": _notes(rng, orders),
    })  # fmt: skip
    lag = rng.integers(0, 12, orders)
    shipments = pa.table({
        "order_id": pa.array(rng.permutation(orders).astype(np.int64)),
        "carrier": pa.array(CARRIERS).take(rng.choice(len(CARRIERS), orders)),
        "shipped": pa.array((days + lag + _day0()).astype(np.int32), pa.date32()),
        "weight_kg": pa.array(np.round(rng.gamma(2.0, 3.0, orders), 3)),
        "tracking": _tracking(rng, orders),
    })  # fmt: skip
    return {"customers": customers, "orders": orders_t, "shipments": shipments}


def _day0() -> int:
    return (FIRST_DAY - dt.date(1970, 1, 1)).days


def _names(rng: np.random.Generator, n: int) -> pa.Array:
    first = pa.array(["Ana", "Ben", "Chloé", "Dario", "Eva", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kaia",
                      "Luca", "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sven", "Tara"])  # fmt: skip
    last = pa.array([f"{a}{b}" for a in ("Berg", "Costa", "Dahl", "Ekström", "Fischer", "Garcia", "Horvat",
                                          "Ivanova", "Jansen", "Kowal")
                     for b in ("", "son", "er", "ová", "ini")])  # fmt: skip
    return pc.binary_join_element_wise(first.take(rng.integers(0, len(first), n)),
                                       last.take(rng.integers(0, len(last), n)), " ")  # fmt: skip


def _notes(rng: np.random.Generator, n: int) -> pa.Array:
    """Free text of 0-6 words (a fifth empty), the words skewed."""
    pool = pa.array([" ".join(rng.choice(_WORDS, k, p=_zipf(len(_WORDS)))) for k in rng.integers(0, 7, 4096)])
    return pool.take(rng.integers(0, len(pool), n))


def _tracking(rng: np.random.Generator, n: int) -> pa.Array:
    prefix = pa.array(["JD", "1Z", "CP", "RR", "00"]).take(rng.integers(0, 5, n))
    digits = pc.utf8_lpad(pc.cast(pa.array(rng.integers(0, 10**10, n)), pa.string()), 10, "0")
    return pc.binary_join_element_wise(prefix, digits, "")


def _zipf(k: int) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1)
    return w / w.sum()


# ---------------------------------------------------------------------------------- queries


def _date(rng: np.random.Generator, span: int) -> tuple[str, str]:
    lo = int(rng.integers(0, DAYS - span))
    a = FIRST_DAY + dt.timedelta(days=lo)
    return a.isoformat(), (a + dt.timedelta(days=span)).isoformat()


def _like_contains(r: np.random.Generator) -> str:
    return f"select order_id, amount, status from orders where note like '%{r.choice(_WORDS)}%'"


def _like_name(r: np.random.Generator) -> str:
    return f"select * from customers where name like '%{r.choice(['son', 'ová', 'er', 'ini', 'Berg'])}%'"


def _tracking_prefix(r: np.random.Generator) -> str:
    prefix = f"{r.choice(['JD', '1Z', 'CP'])}{int(r.integers(0, 10))}"
    return f"select order_id, carrier, tracking from shipments where tracking like '{prefix}%'"


def _group_status(r: np.random.Generator) -> str:
    return ("select status, count(*) as n, sum(amount) as total from orders "
            f"where amount > {r.integers(5, 80)} group by status")  # fmt: skip


def _group_city(r: np.random.Generator) -> str:
    a, b = _date(r, int(r.integers(30, 2000)))
    return ("select c.city, count(*) as n, sum(o.amount) as total from orders o join customers c "
            f"on o.customer_id = c.customer_id where cast(o.odate as date) between date '{a}' and date '{b}' "
            "group by c.city")  # fmt: skip


def _group_name(r: np.random.Generator) -> str:
    return ("select c.name, count(*) as n, sum(o.amount) as total from orders o join customers c "
            f"on o.customer_id = c.customer_id where c.segment = '{r.choice(SEGMENTS)}' "
            "group by c.name")  # fmt: skip


def _join_shipments(r: np.random.Generator) -> str:
    return ("select o.order_id, o.amount, s.carrier, s.weight_kg from orders o join shipments s "
            f"on o.order_id = s.order_id where s.weight_kg > {r.uniform(1, 20):.1f}")  # fmt: skip


def _late(r: np.random.Generator) -> str:
    return ("select s.carrier, count(*) as n from orders o join shipments s on o.order_id = s.order_id "
            f"where s.shipped > cast(o.odate as date) + interval '{int(r.integers(3, 10))} days' "
            "group by s.carrier")  # fmt: skip


def _date_range(r: np.random.Generator) -> str:
    a, b = _date(r, int(r.integers(7, 1500)))
    return f"select * from orders where cast(odate as date) between date '{a}' and date '{b}'"


def _by_month(r: np.random.Generator) -> str:
    return ("select date_trunc('month', shipped) as month, count(*) as n, avg(weight_kg) as w "
            "from shipments "
            f"where carrier = '{r.choice(CARRIERS)}' group by date_trunc('month', shipped)")  # fmt: skip


def _distinct_prefix(r: np.random.Generator) -> str:
    return f"select distinct carrier, substr(tracking, 1, {int(r.integers(2, 5))}) as p from shipments"


def _upper(r: np.random.Generator) -> str:
    return ("select order_id, upper(note) as note, lower(status) as s from orders "
            f"where amount < {r.integers(10, 200)}")  # fmt: skip


def _top_customers(r: np.random.Generator) -> str:
    return ("select o.customer_id, sum(o.amount) as total from orders o "
            f"where o.status = '{r.choice(STATUSES[:3])}' "
            "group by o.customer_id order by total desc limit 50")  # fmt: skip


def _signup_join(r: np.random.Generator) -> str:
    a, b = _date(r, int(r.integers(30, 900)))
    return ("select c.segment, o.status, count(*) as n from customers c join orders o "
            "on c.customer_id = o.customer_id "
            f"where c.signup between date '{a}' and date '{b}' group by c.segment, o.status")  # fmt: skip


KINDS: dict[str, Callable[[np.random.Generator], str]] = {
    "like contains": _like_contains, "like name": _like_name, "like prefix": _tracking_prefix,
    "group by string": _group_status, "join group by string": _group_city, "group by name": _group_name,
    "join two large": _join_shipments, "join dates": _late, "cast date range": _date_range,
    "group by month": _by_month, "distinct substr": _distinct_prefix, "string functions": _upper,
    "top k": _top_customers, "join group by two": _signup_join,
}  # fmt: skip
"""The query kinds, each over the operators the issue found mispredicted."""


def queries(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (kind, sql) pairs, the kinds in turn, literals drawn from ``seed``."""
    rng = np.random.default_rng([seed, 46])
    kinds = list(KINDS)
    return [(kinds[i % len(kinds)], KINDS[kinds[i % len(kinds)]](rng)) for i in range(n)]
