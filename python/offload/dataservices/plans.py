"""Queries as Substrait plans: SQL turned into a plan on the client, plans read and executed on a
node or on the host. DataFusion produces and consumes the plans (one version on both sides:
pyproject pins it); the `substrait` protobuf classes let us read them.

One home for everything DataFusion here: nothing else in the part imports it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


class PlanError(ValueError):
    """A query that cannot be planned, read or executed; the message says what and where."""


def session(threads: int | None = None):  # -> datafusion.SessionContext
    """A DataFusion session. ``threads`` bounds its partitions (one thread per partition); the
    engine's own worker pool follows TOKIO_WORKER_THREADS, which a node sets before its first
    query (see `offload node serve`)."""
    from datafusion import SessionConfig, SessionContext

    n = threads or os.cpu_count() or 1
    return SessionContext(SessionConfig().with_target_partitions(max(1, n)))


def register(ctx, tables: Mapping[str, pa.Table]) -> None:
    for name, t in tables.items():
        batches = t.to_batches() or [pa.RecordBatch.from_pylist([], schema=t.schema)]
        ctx.register_record_batches(name, [batches])


def to_substrait(sql: str, schemas: Mapping[str, pa.Schema]) -> bytes:
    """The optimized Substrait plan of ``sql`` over tables with these schemas (no data needed)."""
    from datafusion.substrait import Serde

    ctx = session(1)
    register(ctx, {n: s.empty_table() for n, s in schemas.items()})
    try:
        return canonical(Serde.serialize_bytes(sql, ctx))
    except Exception as e:  # DataFusion raises plain Exception subclasses
        raise PlanError(f"cannot plan {sql!r}: {first_line(e)}") from None


def canonical(plan: bytes) -> bytes:
    """``plan`` in one byte form: its extension declarations sorted, fields serialized in a fixed
    order. DataFusion's producer declares the functions a plan calls in a hash map's order, so
    the same SQL planned six times gave up to six byte strings (one meaning: the anchors the
    plan refers to are the same), and what a node keeps by plan (its decisions) missed."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.ParseFromString(plan)
    for declared in (p.extension_urns, p.extensions):
        ordered = sorted(declared, key=lambda e: e.SerializeToString(deterministic=True))
        del declared[:]
        declared.extend(ordered)
    return p.SerializeToString(deterministic=True)


def planner(schemas: Mapping[str, pa.Schema]):  # -> datafusion.SessionContext
    """A one-thread session holding empty tables of these schemas, for :func:`result_schema`:
    making one is most of the cost (1.3 ms of CPU a plan made afresh and run over empty tables;
    0.15 ms planned in a session kept), so a caller keeps it while the schemas hold."""
    ctx = session(1)
    register(ctx, {n: s.empty_table() for n, s in schemas.items()})
    return ctx


def result_schema(ctx, plan: bytes) -> pa.Schema:
    """The schema of ``plan``'s result, planned (not run) in ``ctx`` (:func:`planner`);
    PlanError where it cannot be planned."""
    return _planned(ctx, plan).schema()


@dataclass(frozen=True)
class PlanInfo:
    """What a plan reads: for each table, its columns in the order the plan's read asks.
    ``native``: the plan decoded by the native reader (``offload._native.SubstraitPlan``),
    where it models the whole plan; the estimate's walk then runs natively too."""

    reads: dict[str, list[str]]
    output: list[str]
    native: Any = field(default=None, compare=False, repr=False)


def inspect(plan: bytes) -> PlanInfo:
    """Reads a Substrait plan's tables and output names; PlanError if the bytes are not a plan
    or the plan reads something other than named tables. The native reader answers where it
    models the plan (a walk of the plan in Python took a fifth of a decision); the Python one
    otherwise, and for every error."""
    from offload import _native

    try:
        native = _native.SubstraitPlan(plan)
        got = native.info()
    except ValueError:  # not a plan: the Python reader's error says why
        got = None
    if got is not None:
        return PlanInfo(dict(got[0]), got[1], native)
    return _inspect(plan)


def _inspect(plan: bytes) -> PlanInfo:
    """:func:`inspect` by the Python reader: the reference."""
    from google.protobuf.message import DecodeError
    from substrait.plan_pb2 import Plan

    p = Plan()
    try:
        p.ParseFromString(plan)
    except DecodeError as e:
        raise PlanError(f"not a Substrait plan ({len(plan)} bytes): {e}") from None
    if len(p.relations) != 1 or not p.relations[0].HasField("root"):
        raise PlanError(f"a plan must have exactly one root relation, this one has {len(p.relations)}")
    reads: dict[str, list[str]] = {}
    for read in find(p.relations[0].root, "ReadRel"):
        if not read.HasField("named_table") or not read.named_table.names:
            raise PlanError("only reads of named tables are supported (no virtual tables or files)")
        name = read.named_table.names[-1]
        reads[name] = list(dict.fromkeys(reads.get(name, []) + read_columns(read)))
    if not reads:
        raise PlanError("the plan reads no table")
    return PlanInfo(reads, list(p.relations[0].root.names))


def read_columns(read) -> list[str]:
    """The top-level columns a ReadRel reads: its projection's, else its base schema's."""
    names = [f[0] for f in field_names(read.base_schema)]
    if read.HasField("projection"):
        return [names[i.field] for i in read.projection.select.struct_items]
    return names


def field_names(schema) -> list[list[str]]:
    """Each top-level field of a Substrait NamedStruct, as its names: its own first, then its
    nested struct fields' (the NamedStruct lists them all, depth first)."""
    if len(schema.names) == len(schema.struct.types):  # no field nests names (each has one at least)
        return [[n] for n in schema.names]
    out, pos = [], 0
    for t in schema.struct.types:
        n = 1 + _nested_names(t)
        out.append(list(schema.names[pos : pos + n]))
        pos += n
    return out


def _nested_names(t) -> int:
    kind = t.WhichOneof("kind")
    if kind == "struct":
        return sum(1 + _nested_names(c) for c in t.struct.types)
    if kind == "list":
        return _nested_names(t.list.type)
    if kind == "map":
        return _nested_names(t.map.key) + _nested_names(t.map.value)
    return 0


def narrow(plan: bytes) -> bytes:
    """``plan`` with each read's base schema cut to the columns it reads, so that it runs over
    tables that hold only those columns (what a node ships back in ``pushback``). Field
    references above a read point into its output, which does not change."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.ParseFromString(plan)
    for read in find(p.relations[0].root, "ReadRel"):
        if not read.HasField("projection"):
            continue
        if read.HasField("filter") or read.HasField("best_effort_filter"):
            raise PlanError("reads with a pushed-down filter cannot be narrowed yet")
        keep = [i.field for i in read.projection.select.struct_items]
        names, types = list(read.base_schema.names), list(read.base_schema.struct.types)
        if len(names) != len(types):
            raise PlanError("nested columns are not supported")
        kept_types = [type(types[i])() for i in keep]
        for t, i in zip(kept_types, keep, strict=True):
            t.CopyFrom(types[i])
        del read.base_schema.names[:]
        read.base_schema.names.extend(names[i] for i in keep)
        del read.base_schema.struct.types[:]
        read.base_schema.struct.types.extend(kept_types)
        for j, item in enumerate(read.projection.select.struct_items):
            item.field = j
    return p.SerializeToString()


PARTIAL = "__partial"
"""The table name of the nodes' partial results in a split plan's final part."""
_BLOCKING = ("aggregate", "sort", "fetch")
_LOCAL = ("read", "filter", "project")


def split(plan: bytes) -> tuple[bytes, bytes | None, list[str]]:
    """(local, final, names): ``local`` is the plan's partition-local part — everything below
    its lowest blocking operator (aggregate, sort, fetch), or the whole plan — and ``final``
    the rest, reading the local parts' union as table :data:`PARTIAL` (None without a blocking
    operator); ``names`` are the local part's output names. Joins are refused."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.ParseFromString(plan)
    root = p.relations[0].root
    lowest, rel = None, root.input
    while True:
        kind = rel.WhichOneof("rel_type")
        if kind in _BLOCKING:
            lowest = getattr(rel, kind)
        elif kind not in _LOCAL:
            raise PlanError(f"a {kind} relation cannot run over partitioned data sets yet")
        if kind == "read":
            break
        rel = getattr(rel, kind).input
    if lowest is None:
        return plan, None, list(root.names)
    width = _width(lowest.input)
    names = [f"c{i}" for i in range(width)]
    local = Plan()
    local.CopyFrom(p)
    local.relations[0].root.input.CopyFrom(lowest.input)
    del local.relations[0].root.names[:]
    local.relations[0].root.names.extend(names)
    local_bytes = local.SerializeToString()
    schema = _local_schema(local_bytes, plan)
    read = lowest.input.__class__()
    read.read.named_table.names.append(PARTIAL)
    read.read.base_schema.names.extend(names)
    for f in schema:
        read.read.base_schema.struct.types.add().CopyFrom(substrait_type(f.type))
    read.read.base_schema.struct.nullability = 2  # NULLABILITY_REQUIRED (the struct itself)
    lowest.input.CopyFrom(read)
    return local_bytes, p.SerializeToString(), names


def _width(rel) -> int:
    """Output fields of a local relation (read, filter, project; emit mappings applied)."""
    kind = rel.WhichOneof("rel_type")
    node = getattr(rel, kind)
    if node.HasField("common") and node.common.HasField("emit"):
        return len(node.common.emit.output_mapping)
    if kind == "read":
        if node.HasField("projection"):
            return len(node.projection.select.struct_items)
        return len(node.base_schema.names)
    if kind == "filter":
        return _width(node.input)
    return _width(node.input) + len(node.expressions)


def _local_schema(local: bytes, whole: bytes) -> pa.Schema:
    """The local part's result schema, planned over empty tables of the plan's reads."""
    from substrait.plan_pb2 import Plan

    p = Plan()
    p.ParseFromString(whole)
    tables = {}
    for read in find(p.relations[0].root, "ReadRel"):
        names = [f[0] for f in field_names(read.base_schema)]
        types = [arrow_type(t) for t in read.base_schema.struct.types]
        tables[read.named_table.names[-1]] = pa.schema(list(zip(names, types, strict=True))).empty_table()
    schema, _ = execute_batches(local, tables, 1)
    return schema


_TYPES = {
    "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(), "fp32": pa.float32(),
    "fp64": pa.float64(), "bool": pa.bool_(), "string": pa.string(), "date": pa.date32(),
    "binary": pa.binary(),
}  # fmt: skip
"""The flat types without parameters, on their default variation (0)."""
_VARIATIONS = {
    ("i8", 1): pa.uint8(), ("i16", 1): pa.uint16(), ("i32", 1): pa.uint32(), ("i64", 1): pa.uint64(),
    ("string", 1): pa.large_string(), ("string", 2): pa.string_view(), ("binary", 1): pa.large_binary(),
    ("binary", 2): pa.binary_view(), ("date", 1): pa.date64(),
}  # fmt: skip
"""DataFusion's type variations (its producer and consumer agree on them): 1 is unsigned for
integers, large for strings and binaries, milliseconds for dates; 2 a view layout."""
_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def arrow_type(t) -> pa.DataType:
    """The Arrow type of a Substrait type as DataFusion 55 writes them: integers (signed and
    unsigned), floats, booleans, strings and binaries (plain, large, view, fixed size), dates,
    timestamps with and without a zone (a zoned one comes back in UTC: Substrait carries no
    zone), times, durations, month-day-nano intervals, decimals, dictionaries, lists."""
    kind = t.WhichOneof("kind")
    k = getattr(t, kind) if kind else None
    var = getattr(k, "type_variation_reference", 0)
    if (kind, var) in _VARIATIONS:
        return _VARIATIONS[(kind, var)]
    if kind in _TYPES and var == 0:
        return _TYPES[kind]
    if kind in ("precision_timestamp", "precision_timestamp_tz") and k.precision in _UNITS:
        return pa.timestamp(_UNITS[k.precision], tz="UTC" if kind.endswith("_tz") else None)
    if kind == "precision_time" and k.precision in _UNITS:
        return (pa.time64 if var == 1 else pa.time32)(_UNITS[k.precision])
    if kind == "interval_day" and var == 1 and k.precision in _UNITS:
        return pa.duration(_UNITS[k.precision])
    if kind == "interval_compound":
        return pa.month_day_nano_interval()
    if kind == "decimal":
        return (pa.decimal256 if var == 1 else pa.decimal128)(k.precision, k.scale)
    if kind == "fixed_binary":
        return pa.binary(k.length)
    if kind == "map" and var == 1:
        return pa.dictionary(arrow_type(k.key), arrow_type(k.value))
    if kind == "list":
        return pa.list_(arrow_type(k.type))
    raise PlanError(f"Substrait type {kind} (variation {var}) is not supported here")


def substrait_type(t: pa.DataType):
    """The (nullable) Substrait type of an Arrow type, as DataFusion 55's producer writes it
    (the inverse of :func:`arrow_type`; a timestamp's zone is dropped, as Substrait has none)."""
    from substrait.type_pb2 import Type

    out = Type()
    kind, var, fields = _substrait_kind(t)
    k = getattr(out, kind)
    for name, value in fields.items():
        if isinstance(value, pa.DataType):
            getattr(k, name).CopyFrom(substrait_type(value))
        else:
            setattr(k, name, value)
    if var:
        k.type_variation_reference = var
    k.nullability = 1  # NULLABILITY_NULLABLE
    return out


def _substrait_kind(t: pa.DataType) -> tuple[str, int, dict]:
    """(Substrait kind, variation, fields) of Arrow type ``t``."""
    for kind, at in _TYPES.items():
        if t == at:
            return kind, 0, {}
    for (kind, var), at in _VARIATIONS.items():
        if t == at:
            return kind, var, {}
    digits = {u: d for d, u in _UNITS.items()}
    T = pa.types
    if T.is_timestamp(t):
        return ("precision_timestamp_tz" if t.tz else "precision_timestamp"), 0, {"precision": digits[t.unit]}
    if T.is_time(t):
        return "precision_time", int(T.is_time64(t)), {"precision": digits[t.unit]}
    if T.is_duration(t):
        return "interval_day", 1, {"precision": digits[t.unit]}
    if t == pa.month_day_nano_interval():
        return "interval_compound", 0, {"precision": 9}
    if T.is_decimal(t):
        return "decimal", int(T.is_decimal256(t)), {"precision": t.precision, "scale": t.scale}
    if T.is_fixed_size_binary(t):
        return "fixed_binary", 0, {"length": t.byte_width}
    if T.is_dictionary(t):
        return "map", 1, {"key": t.index_type, "value": t.value_type}
    if T.is_list(t):
        return "list", 0, {"type": t.value_type}
    raise PlanError(f"Arrow type {t} is not supported here")


_OPAQUE = {"SingularOrList": ("options",), "MultiOrList": ("options",)}
"""Fields the walkers do not enter: an IN list's values (literals; a 100k-value list would
cost 200k messages per walk)."""


_VALUE_FIELDS = frozenset(
    ("output_type", "type", "base_schema", "literal",
     "direct_reference", "masked_reference", "root_reference", "outer_reference",
     "projection", "common", "advanced_extension")
)  # fmt: skip
"""Fields that hold only types, values, field references' paths, a read's column mask and a
relation's emit and hints, never a relation or a call: the walkers do not enter them either (a
wide table's schema alone is dozens of messages a walk, and each column a ``select *`` reads
and projects four more)."""


def _descend(descriptor) -> dict[str, bool]:
    """The fields of a message type the walkers enter (message fields, not :data:`_OPAQUE`'s nor
    :data:`_VALUE_FIELDS`), each with whether it is repeated; kept per type."""
    fields = _DESCEND.get(descriptor)
    if fields is None:
        skip = _OPAQUE.get(descriptor.name, ())
        fields = _DESCEND[descriptor] = {
            fd.name: fd.is_repeated
            for fd in descriptor.fields
            if fd.message_type is not None and fd.name not in skip and fd.name not in _VALUE_FIELDS
        }
    return fields


_DESCEND: dict[Any, dict[str, bool]] = {}


def _children(msg) -> list:
    """The sub-messages one level under ``msg`` (not an IN list's values: :data:`_OPAQUE`; not
    types and literals: :data:`_VALUE_FIELDS`)."""
    fields = _descend(msg.DESCRIPTOR)
    out: list = []
    for fd, val in msg.ListFields():
        repeated = fields.get(fd.name)
        if repeated is not None:
            out += val if repeated else (val,)
    return out


def walk(msg) -> list:
    """Every sub-message under ``msg`` (an IN list's values aside), in no particular order: a
    list built with a stack (nested generators cost a third of a decision's features). A
    decision walks its plan once, with :class:`PlanIndex`."""
    out: list = []
    stack = [msg]
    while stack:
        found = _children(stack.pop())
        out += found
        stack += found
    return out


def function_names(plan) -> dict[int, str]:
    """The plan's extension functions by anchor, their names without a signature (``lt``, ``sin``)."""
    return {
        e.extension_function.function_anchor: e.extension_function.name.split(":")[0]
        for e in plan.extensions
        if e.WhichOneof("mapping_type") == "extension_function"
    }


CHEAP_FUNCTIONS = frozenset(
    ("equal", "not_equal", "lt", "lte", "gt", "gte", "between", "and", "or", "not", "is_null", "is_not_null",
     "add", "subtract", "multiply", "divide", "negate", "modulus", "abs", "coalesce")
)  # fmt: skip
"""Scalar functions a vectorized engine runs at memory speed (and IN lists: a hash lookup)."""
STRING_FUNCTIONS = frozenset(
    ("like", "ilike", "substring", "substr", "substr_index", "lower", "upper", "concat", "concat_ws",
     "str_concat", "strpos", "instr", "starts_with", "ends_with", "contains", "char_length",
     "character_length", "length", "octet_length", "bit_length", "trim", "btrim", "ltrim", "rtrim",
     "replace", "left", "right", "lpad", "rpad", "reverse", "split_part", "translate", "initcap",
     "repeat", "levenshtein", "overlay", "ascii", "chr", "to_hex", "md5", "sha224", "sha256",
     "sha384", "sha512", "digest", "encode", "decode", "find_in_set", "uuid")
)  # fmt: skip
"""Functions over strings: they cost per row and per character, so apart from the others."""


STRING_PREFIXES = ("regexp_", "regex_")
"""Prefixes of string functions beyond :data:`STRING_FUNCTIONS` (regular expressions)."""


def function_class(name: str) -> str:
    """How a scalar function costs: "cheap" (:data:`CHEAP_FUNCTIONS`: memory speed), "string"
    (:data:`STRING_FUNCTIONS`, regular expressions: per character) or "heavy" (any other: sqrt,
    sin, ln... per row, which a slow CPU pays for)."""
    if name in CHEAP_FUNCTIONS:
        return "cheap"
    if name in STRING_FUNCTIONS or name.startswith(STRING_PREFIXES):
        return "string"
    return "heavy"


def call_class(m, names: dict[int, str]) -> str:
    """Scalar function call ``m``'s cost class: :func:`function_class` of its name, but a LIKE
    anchored at one end is a cheap call (:func:`anchored_like`)."""
    name = names.get(m.function_reference, "?")
    return "cheap" if name == "like" and anchored_like(m) else function_class(name)


def anchored_like(m) -> bool:
    """A LIKE whose pattern is a literal anchored at one end with no other wildcard
    (``'1Z5%'``, ``'%.com'``) and no escape: Arrow's kernel compares that end's bytes
    (starts_with, ends_with), as cheap as an equality, where ``'%pickup%'`` searches each value
    and other patterns run a regular expression (a new user's ``tracking like '1Z5%'`` over
    400,000 shipments was priced as a string search, offload 61 ms for a measured 31-39)."""
    escape = m.arguments[2].value.literal if len(m.arguments) == 3 else None
    if len(m.arguments) not in (2, 3) or (escape is not None and escape.WhichOneof("literal_type") != "null"):
        return False
    lit = m.arguments[1].value.literal
    kind = lit.WhichOneof("literal_type")
    if kind not in ("string", "varchar"):
        return False
    p = lit.string if kind == "string" else lit.varchar.value
    core = p[:-1] if p.endswith("%") else p[1:] if p.startswith("%") else None
    return core is not None and not any(c in core for c in "%_\\")


def call_counts(msg, names: dict[int, str]) -> dict[str, int]:
    """Scalar function calls under ``msg`` (nested ones included) by :func:`function_class`, an
    IN list counting as one cheap call; ``names``: the plan's :func:`function_names`."""
    out = {"cheap": 0, "string": 0, "heavy": 0}
    for m in walk(msg):
        kind = m.DESCRIPTOR.name
        if kind == "ScalarFunction":
            out[call_class(m, names)] += 1
        elif kind in _OPAQUE:
            out["cheap"] += 1
        elif kind == "Cast":
            out[cast_class(m)] += 1
    return out


_PARSED_CASTS = frozenset(
    (
        "date",
        "precision_time",
        "precision_timestamp",
        "precision_timestamp_tz",
        "string",
        "varchar",
        "fixed_char",
    )
)


def cast_class(cast) -> str:
    """A cast's cost class: one to a date, time or text parses or formats characters
    ("string"), any other converts a word ("cheap"). Casts count in the work (call_counts),
    not among the plan's functions (PlanShape)."""
    return "string" if cast.type.WhichOneof("kind") in _PARSED_CASTS else "cheap"


@dataclass(frozen=True)
class PlanShape:
    """What the time models' features take from a plan beyond its sizes: its scalar function
    calls (all; heavy and string ones by :func:`function_class`), the kinds of its relations
    (Substrait message names: "AggregateRel", "JoinRel"...) and the columns it reads of each
    table (every read of it together)."""

    functions: int
    heavy: int
    strings: int
    kinds: frozenset[str]
    reads: dict[str, frozenset[str]]


@functools.cache
def native_classes() -> Any:
    """The native reader's copy of :func:`function_class`'s lists, made once:
    ``offload._native.FunctionClasses``."""
    from offload import _native

    return _native.FunctionClasses(sorted(CHEAP_FUNCTIONS), sorted(STRING_FUNCTIONS), list(STRING_PREFIXES))


class PlanIndex:
    """One walk of a parsed plan: every sub-message under its root (``messages``, the root
    first; ``rels``, the relations among them; ``functions``, the scalar functions' names) and
    per message the scalar calls under it by class, counted once bottom-up. A decision asks
    for the calls under many expressions, each a subtree of the plan; walked each time, that
    was five walks of the plan a decision. Equal to :func:`walk` and :func:`call_counts` on
    every sub-message (tested on random plans); a message of the plan it does not hold (a
    copy) is walked."""

    def __init__(self, plan) -> None:
        self.names = names = function_names(plan)
        self.messages: list = [plan.relations[0].root]
        self.rels: list = []
        self.call_classes: list[str] = []  # each call's class (call_class), in the walk's order
        parents, own = [-1], [-1]  # own: the class a message's call is of (-1: not a call)
        i = 0
        while i < len(self.messages):  # breadth first: every message after its parent
            m = self.messages[i]
            d = m.DESCRIPTOR
            kind = d.name
            if kind == "ScalarFunction":
                self.call_classes.append(call_class(m, names))
                own[i] = _CLASS_INDEX[self.call_classes[-1]]
            elif kind in _OPAQUE:
                own[i] = 0
            elif kind == "Cast":
                own[i] = _CLASS_INDEX[cast_class(m)]
            elif kind.endswith("Rel"):
                self.rels.append(m)
            fields = _descend_by_field(d)
            for fd, val in m.ListFields():
                repeated = fields.get(fd)
                if repeated is None:
                    continue
                found = val if repeated else (val,)
                self.messages += found
                parents += [i] * len(found)
                own += [-1] * len(found)
            i += 1
        below = [[0, 0, 0] for _ in self.messages]  # cheap, string, heavy calls under each
        for j in range(len(self.messages) - 1, 0, -1):
            up, c = below[parents[j]], below[j]
            up[0] += c[0]
            up[1] += c[1]
            up[2] += c[2]
            if own[j] >= 0:
                up[own[j]] += 1
        # ids are the messages' own while this index holds them (the protobuf runtime keeps one
        # wrapper per sub-message alive, so reading a field again gives the same object)
        self._below = {id(m): c for m, c in zip(self.messages, below, strict=True)}

    def shape(self) -> PlanShape:
        """The plan's :class:`PlanShape`."""
        classes = self.call_classes
        reads: dict[str, frozenset[str]] = {}
        for r in self.rels:
            if r.DESCRIPTOR.name == "ReadRel" and r.HasField("named_table") and r.named_table.names:
                name = r.named_table.names[-1]
                reads[name] = reads.get(name, frozenset()) | frozenset(read_columns(r))
        kinds = frozenset(r.DESCRIPTOR.name for r in self.rels) - {"Rel"}  # the kinds, not their wrapper
        return PlanShape(len(classes), classes.count("heavy"), classes.count("string"), kinds, reads)

    def calls(self, msg) -> dict[str, int]:
        """:func:`call_counts` of ``msg``."""
        c = self._below.get(id(msg))
        if c is None:
            return call_counts(msg, self.names)
        return {"cheap": c[0], "string": c[1], "heavy": c[2]}


def _descend_by_field(descriptor) -> dict[Any, bool]:
    """:func:`_descend` by field descriptor (what ``ListFields`` gives: no name to read)."""
    fields = _DESCEND_BY_FIELD.get(descriptor)
    if fields is None:
        enter = _descend(descriptor)
        fields = _DESCEND_BY_FIELD[descriptor] = {
            fd: enter[fd.name] for fd in descriptor.fields if fd.name in enter
        }
    return fields


_DESCEND_BY_FIELD: dict[Any, dict[Any, bool]] = {}


_CLASS_INDEX = {"cheap": 0, "string": 1, "heavy": 2}


def function_calls(msg) -> int:
    """Scalar function calls under ``msg``, nested ones included (an IN list: one)."""
    return sum(m.DESCRIPTOR.name == "ScalarFunction" or m.DESCRIPTOR.name in _OPAQUE for m in walk(msg))


def heavy_calls(msg, names: dict[int, str]) -> int:
    """Scalar function calls under ``msg`` (nested ones included) of class "heavy" (neither
    cheap nor string functions); ``names``: the plan's :func:`function_names`."""
    return call_counts(msg, names)["heavy"]


def string_calls(msg, names: dict[int, str]) -> int:
    """The same for string functions (:data:`STRING_FUNCTIONS`)."""
    return call_counts(msg, names)["string"]


def find(msg, type_name: str) -> list:
    """Every sub-message of type ``type_name`` under ``msg`` (joins, subqueries included), not
    looking inside the ones found."""
    out = []
    for v in _children(msg):
        if v.DESCRIPTOR.name == type_name:
            out.append(v)
        else:
            out += find(v, type_name)
    return out


def execute(plan: bytes, tables: Mapping[str, pa.Table], threads: int | None = None) -> pa.Table:
    """Runs ``plan`` over ``tables`` (name -> table) with DataFusion."""
    return _dataframe(plan, tables, threads).to_arrow_table()


def count_rows(plan: bytes, tables: Mapping[str, pa.Table], threads: int | None = None) -> int:
    """The rows ``plan`` gives over ``tables``, counted without materializing them."""
    return int(_dataframe(plan, tables, threads).count())


def execute_batches(plan: bytes, tables: Mapping[str, pa.Table], threads: int | None = None):
    """(schema, iterator of pyarrow RecordBatches) of ``plan`` over ``tables``, streamed."""
    df = _dataframe(plan, tables, threads)
    schema = df.schema()
    return schema, (b.to_pyarrow() for b in df.execute_stream())


def explain(plan: bytes, tables: Mapping[str, pa.Table]) -> str:
    """DataFusion's physical plan for ``plan`` over ``tables``, as indented text."""
    return _dataframe(plan, tables, 1).execution_plan().display_indent()


def count_rows_in(ctx, plan: bytes) -> int:
    """The rows ``plan`` gives in a session whose tables are registered already (:func:`session`,
    :func:`register`): a session made once serves many small plans (a third of each one's cost)."""
    return int(_planned(ctx, plan).count())


def run_in(ctx, plan: bytes) -> pa.Table:
    """``plan``'s result in a session whose tables are registered already (:func:`count_rows_in`)."""
    return _planned(ctx, plan).to_arrow_table()


def _dataframe(plan: bytes, tables: Mapping[str, pa.Table], threads: int | None):
    ctx = session(threads)
    register(ctx, tables)
    return _planned(ctx, plan)


def _planned(ctx, plan: bytes):
    from datafusion.substrait import Consumer, Serde

    try:
        lp = Consumer.from_substrait_plan(ctx, Serde.deserialize_bytes(plan))
        return ctx.create_dataframe_from_logical_plan(lp)
    except Exception as e:
        raise PlanError(f"cannot execute the plan: {first_line(e)}") from None


def same_answer(a: pa.Table, b: pa.Table, rel: float = 1e-9) -> bool:
    """Whether two results hold the same rows in any order: exact for all but floating-point
    columns, which may differ by ``rel`` (sums in another order round differently)."""
    import numpy as np
    import pyarrow.compute as pc

    if a.schema.names != b.schema.names or a.num_rows != b.num_rows:
        return False
    if a.num_rows == 0:
        return True
    exact = [n for n, t in zip(a.schema.names, a.schema.types, strict=True) if not pa.types.is_floating(t)]
    keys = [(n, "ascending") for n in exact + [n for n in a.schema.names if n not in exact]]
    a, b = a.sort_by(keys), b.sort_by(keys)
    for n in a.schema.names:
        x, y = a.column(n), b.column(n)
        if n in exact:
            if not x.equals(y):
                return False
            continue
        if not pc.equal(pc.is_null(x), pc.is_null(y)).to_numpy(zero_copy_only=False).all():
            return False
        fx, fy = (c.to_numpy(zero_copy_only=False).astype(float) for c in (x, y))
        if not np.allclose(fx, fy, rtol=rel, atol=0, equal_nan=True):
            return False
    return True


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
