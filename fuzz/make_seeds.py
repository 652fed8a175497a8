"""Writes the committed seed corpora (fuzz/corpus-seeds/<target>/): a few valid inputs per target.

Run from the checkout: python3 fuzz/make_seeds.py. The frames and table files are written by
hand from the layouts in crates/serve/src/protocol.rs and crates/recsys/src/table.rs: rerun this
after a layout changes (the fuzzers still start from stale seeds, only less deep).
"""

import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SEEDS = ROOT / "corpus-seeds"
EXAMPLE = ROOT.parent / "data" / "examples" / "mct-mini"


def write(target: str, name: str, data: bytes) -> None:
    d = SEEDS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


# ---- serve_frame: requests (raw and encoded layouts) and a reply ---------------------------


def criteria_fingerprint(names: list[str]) -> int:
    """FNV-1a over each criterion name's bytes and a 0 byte (protocol.rs)."""
    return fnv1a(b"".join(n.encode() + b"\0" for n in names))


CRITERIA = (EXAMPLE / "queries.csv").read_text().splitlines()[0].split(",")[1:]


def request_head(request_id: int, deadline_us: int, stop_after: int, n: int, layout: int) -> bytes:
    """Protocol version 2: magic OFQ2, and the criteria fingerprint after the layout byte."""
    fields = struct.pack(
        "<QQIIBQ", request_id, deadline_us, stop_after, n, layout, criteria_fingerprint(CRITERIA)
    )
    return b"OFQ2" + fields


def raw_request(request_id: int, rows: list[list[str]], stop_after: int = 0) -> bytes:
    n_cols = len(rows[0]) if rows else 0
    b = request_head(request_id, 0, stop_after, len(rows), 0) + struct.pack("<H", n_cols)
    for c in range(n_cols):
        data, offsets = b"", [0]
        for r in rows:
            data += r[c].encode()
            offsets.append(len(data))
        b += struct.pack(f"<{len(offsets)}I", *offsets) + data
    return b


def encoded_request(request_id: int, width: int, codes: list[int], version: int = 1) -> bytes:
    n = len(codes) // width
    head = request_head(request_id, 1_900_000_000_000_000, 0, n, 1)
    return head + struct.pack("<QH", version, width) + struct.pack(f"<{len(codes)}I", *codes)


def reply(request_id: int, rule: list[int], content: list[int], message: str = "") -> bytes:
    stages = [(0, 1200), (1, 800), (2, 5000), (3, 300)]
    b = b"OFR1" + struct.pack("<QBQI", request_id, 0 if not message else 4, 7, len(rule))
    b += struct.pack(f"<{len(rule)}I", *rule) + struct.pack(f"<{len(content)}q", *content)
    b += struct.pack("<B", len(stages)) + b"".join(struct.pack("<BQ", s, ns) for s, ns in stages)
    m = message.encode()
    return b + struct.pack("<I", len(m)) + m


def serve_seeds() -> None:
    lines = (EXAMPLE / "queries.csv").read_text().splitlines()[1:]
    rows = [line.split(",")[1:] for line in lines if line]
    write("serve_frame", "raw-4", raw_request(1, rows))
    write("serve_frame", "raw-1-stop", raw_request(2, rows[:1], stop_after=1))
    write(
        "serve_frame",
        "raw-utf8",
        raw_request(
            3, [["II", "ZRH", "LX", "LX", "1234", "2026-03-15"], ["DD", "Zürich", "", "*", "0", "01JAN2026"]]
        ),
    )
    write("serve_frame", "raw-empty", request_head(4, 0, 0, 0, 0) + struct.pack("<H", 0))
    write("serve_frame", "encoded-2", encoded_request(5, 6, [1, 1, 2, 2, 3, 4, 2, 1, 0, 0, 1, 2]))
    # Codes past the dictionaries, as a client may send: the fast matcher once read the first
    # two (mandatory) into another tuple's key and answered rule 1 (a crash the fuzzer found).
    beyond = [5, 0, 957530112, 442634, 0, 2, 306498561, 24812]
    write("serve_frame", "encoded-beyond-dictionary", encoded_request(6, 8, beyond))
    write("serve_frame", "reply-ok", reply(1, [2, 0xFFFFFFFF], [40, 0]))
    write("serve_frame", "reply-bad", reply(9, [], [], "column 2 is not UTF-8"))


# ---- rules_load: format byte, rule type, NUL, rules CSV ------------------------------------

ERBIUM_XML = """<?xml version="1.0" encoding="ISO-8859-1"?>
<ruleTypeDefinition>
<code>MINI</code>
<subversion>1</subversion>
<description>mini MCT</description>
<criterionDefinition><code>CTN_TYPE</code><sequenceNumber>0</sequenceNumber>
<criterionTypeReference><id>273</id><fileName>a.xml</fileName></criterionTypeReference>
<isMandatory>true</isMandatory><weight>0</weight><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>MCT_PRD</code><sequenceNumber>1</sequenceNumber>
<criterionTypeReference><id>212</id><fileName>d.xml</fileName></criterionTypeReference>
<isMandatory>false</isMandatory><weight>1</weight><guiProperties></guiProperties><guiProperties></guiProperties></criterionDefinition>
<criterionDefinition><code>FLT_RG</code><sequenceNumber>2</sequenceNumber>
<criterionTypeReference><id>412</id><fileName>i.xml</fileName></criterionTypeReference>
<isMandatory>false</isMandatory><weight>2</weight><guiProperties></guiProperties><guiProperties></guiProperties></criterionDefinition>
</ruleTypeDefinition>
"""

ERBIUM_CSV = """RULE_ID,WEIGHT,STATUS,VICEVERSA,TAGS,CRITERIA,\
CTN_TYPE,MCT_PRD,FLT_RG,CONTENT,Hour,INVALID,Minutes
"A",,,,,,"DD","01JAN2019-31DEC2019","0100/0199",,"1","FALSE","30"
"B",,,,,,"DI",,,,"0","TRUE","0"
"""


def rules_seeds() -> None:
    rt, rules = (EXAMPLE / "ruletype.toml").read_bytes(), (EXAMPLE / "rules.csv").read_bytes()
    write("rules_load", "native-mct-mini", b"\x00" + rt + b"\x00" + rules)
    native_rt = b'code = "T"\n[[criterion]]\ncode = "A"\nkind = "equ"\nmandatory = true\nweight = 0\n'
    native_rt += b'[[criterion]]\ncode = "R"\nkind = "int_range"\nweight = "18446744073709551615"\n'
    native_rt += b'[[criterion]]\ncode = "D"\nkind = "date_range"\nweight = 3\n'
    native_rules = b'RULE_ID,D,A,R,CONTENT\nr1,2026-01-01..,"x,y",..199,5\n"r2",15MAR2026,*,100,-7\n'
    write("rules_load", "native-ranges", b"\x02" + native_rt + b"\x00" + native_rules)
    write("rules_load", "erbium-mini", b"\x01" + ERBIUM_XML.encode("latin-1") + b"\x00" + ERBIUM_CSV.encode())


# ---- recsys_table: whole table files (format version 2: row checksums) -----------------


def fnv1a(b: bytes) -> int:
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _crc32c_table() -> list[int]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC32C = _crc32c_table()


def crc32c(b: bytes) -> int:
    c = 0xFFFFFFFF
    for x in b:
        c = CRC32C[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def row_bytes(dim: int) -> int:
    v = max(dim, 1) * 4
    return 1 << (v - 1).bit_length() if v <= 512 else ceil_to(v, 512)


def table(rows: int, dim: int) -> bytes:
    rb = row_bytes(dim)
    bb = max(rb, 512)
    blocks = -(-(rows * rb) // bb)
    sums_offset = ceil_to(4096 + blocks * bb, 4096)
    file_bytes = sums_offset + ceil_to(blocks * 4, 4096)
    body = b"".join(
        struct.pack(f"<{dim}f", *[(r * dim + j) / 8 for j in range(dim)]).ljust(rb, b"\0")
        for r in range(rows)
    )
    body = body.ljust(blocks * bb, b"\0")
    area = b"".join(struct.pack("<I", crc32c(body[i * bb : (i + 1) * bb])) for i in range(blocks))
    h = b"OFLDEMB1" + struct.pack("<IIQII", 2, dim, rows, rb, bb)
    h += struct.pack("<QQQII", 4096, sums_offset, blocks, crc32c(area), 1)
    h += struct.pack("<Q", fnv1a(h))
    out = h.ljust(4096, b"\0") + body
    return out.ljust(sums_offset, b"\0") + area.ljust(file_bytes - sums_offset, b"\0")


def table_seeds() -> None:
    write("recsys_table", "rows3-dim1", table(3, 1))
    write("recsys_table", "rows5-dim4", table(5, 4))
    write("recsys_table", "rows2-dim130", table(2, 130))
    write("recsys_table", "empty-dim16", table(0, 16))


if __name__ == "__main__":
    serve_seeds()
    rules_seeds()
    table_seeds()
    for d in sorted(SEEDS.iterdir()):
        print(d.name, len(list(d.iterdir())), "seeds")
