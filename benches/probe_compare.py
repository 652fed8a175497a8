"""The probe against independent reference tools, measured side by side in one run (issue 4's
agreement target, within 15%):

1. io_uring 4 KiB O_DIRECT random reads: `offload probe`'s measurement vs fio (Debian package
   `fio`, `make bench-tools` installs it) with ioengine=io_uring, same directory, same queue
   depth, same file size, alternated per depth;
2. ZeroMQ: the probe's Rust PUSH/PULL stream and REQ/REP round trip vs libzmq's own perf
   programs (local_thr/remote_thr, local_lat/remote_lat, built here from the libzmq source the
   `zmq` crate vendors), two processes pinned to two CPUs, same transport, message size and
   message count, both reporting the mean time per message, alternated over rounds.

    python benches/probe_compare.py --dir build/probe [--out benches/results/probe-compare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from offload import _native
from offload.host.machine import machine
from offload.probe import ZMQ_PEER

CPUS = sorted(os.sched_getaffinity(0))


def fio_iops(directory: Path, size: int, qd: int, seconds: float) -> dict[str, float]:
    fio = shutil.which("fio")
    if fio is None:
        raise SystemExit("fio not found: `make bench-tools` (apt-get install fio)")
    cmd = [
        fio, "--name=offload-compare", f"--filename={directory / 'fio-compare.dat'}", f"--size={size}",
        "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=io_uring", f"--iodepth={qd}",
        f"--runtime={seconds}", "--time_based", "--output-format=json", "--randrepeat=0",
    ]  # fmt: skip
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    read = out["jobs"][0]["read"]
    pct = read["clat_ns"].get("percentile", {})
    return {
        "iops": read["iops"],
        "p50_s": pct.get("50.000000", 0) / 1e9,
        "p99_s": pct.get("99.000000", 0) / 1e9,
    }


def ours_iops(directory: Path, size: int, qd: int, seconds: float) -> dict[str, float]:
    r = _native.probe_random_reads(str(directory), size, [qd], seconds)["points"][0]
    return {"iops": r["iops"], "p50_s": r["p50_s"], "p99_s": r["p99_s"]}


def build_libzmq_perf(out: Path) -> Path:
    """Builds libzmq's own perf programs (local_lat, remote_lat, local_thr, remote_thr) from the
    libzmq source that the `zmq` crate vendors, against the static library cargo built."""
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    vendors = sorted(cargo_home.glob("registry/src/*/zeromq-src-*/vendor"))
    libs = sorted(
        Path("target/release/build").glob("zmq-sys-*/out/lib/libzmq.a"), key=lambda p: p.stat().st_mtime
    )
    if not vendors or not libs:
        raise SystemExit("libzmq source or libzmq.a not found: run `make develop` first")
    out.mkdir(parents=True, exist_ok=True)
    for tool in ("local_lat", "remote_lat", "local_thr", "remote_thr"):
        if not (out / tool).exists():
            cmd = ["g++", "-O2", f"-I{vendors[-1]}/include", str(vendors[-1] / "perf" / f"{tool}.cpp"),
                   "-o", str(out / tool), str(libs[-1]), "-lpthread"]  # fmt: skip
            subprocess.run(cmd, check=True)
    return out


def _pair(bin_dir: Path, local: str, remote: str, endpoint: str, size: int, count: int) -> str:
    """Runs libzmq's local/remote pair pinned to two CPUs as the probe places its own sides (the
    binding side on the first CPU, its peer on the second); returns both sides' reports."""
    args = [endpoint, str(size), str(count)]
    loc = subprocess.Popen(
        ["taskset", "-c", str(CPUS[0]), str(bin_dir / local), *args], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.3)
    rem = subprocess.run(["taskset", "-c", str(CPUS[1]), str(bin_dir / remote), *args],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    out, _ = loc.communicate(timeout=300)
    return out + rem.stdout


def round_trip_count(size: int) -> int:
    """Round trips per run, the same for both tools (~2 s at 100 us)."""
    return max(200, min(20_000, int(2e9 / max(size, 64) / 50)))


def stream_count(size: int) -> int:
    """Messages per stream run, the same for both tools (~4 GB, at most 10^6 messages)."""
    return max(500, min(1_000_000, int(4e9 / max(size, 64))))


def libzmq_round_trip_s(bin_dir: Path, endpoint: str, size: int) -> float:
    text = _pair(bin_dir, "local_lat", "remote_lat", endpoint, size, round_trip_count(size))
    one_way_us = float(re.search(r"average latency: ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    return 2 * one_way_us / 1e6  # local_lat reports half a round trip


def libzmq_stream_s(bin_dir: Path, endpoint: str, size: int) -> float:
    text = _pair(bin_dir, "local_thr", "remote_thr", endpoint, size, stream_count(size))
    msgs = float(re.search(r"mean throughput: ([\d.]+) \[msg/s\]", text).group(1))  # type: ignore[union-attr]
    return 1.0 / msgs


def ours_zmq_s(directory: Path, transport: str, kind: str, size: int) -> float:
    """The probe's measurement under the reference tools' protocol: one run of the same number
    of operations, reporting the mean time per operation (as local_lat and local_thr do)."""
    count = stream_count(size) if kind == "stream" else round_trip_count(size)
    name = f"zmq/{transport}-{kind}"
    ch = _native.probe_channel(name, False, str(directory), (size, size), ZMQ_PEER, count)
    return float(ch["points"][0]["mean_s"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="build/probe", help="a directory on the disk to test (not tmpfs)")
    ap.add_argument("--file-gib", type=float, default=1.0)
    ap.add_argument("--depths", default="1,8,32,128")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", default="io_uring,zmq", help="what to compare: io_uring, zmq or both")
    ap.add_argument("--out", default="benches/results/probe-compare.json")
    a = ap.parse_args(argv)
    if len(CPUS) < 2:
        raise SystemExit("needs two CPUs")
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    size = int(a.file_gib * (1 << 30))
    now = datetime.now(UTC).isoformat(timespec="seconds")
    result: dict[str, Any] = {
        "benchmark": "probe-compare",
        "date": now,
        "machine": machine(),
        "io_uring": [],
        "zmq": [],
    }
    parts = set(a.parts.split(","))
    for qd in [int(x) for x in a.depths.split(",")] if "io_uring" in parts else []:
        ours, ref = [], []
        for _ in range(a.rounds):  # alternated, so drift hits both
            ours.append(ours_iops(d, size, qd, a.seconds))
            ref.append(fio_iops(d, size, qd, a.seconds))
        o, f = statistics.median(x["iops"] for x in ours), statistics.median(x["iops"] for x in ref)
        row = {"queue_depth": qd, "ours_iops": o, "fio_iops": f, "ratio": o / f, "ours": ours, "fio": ref}
        result["io_uring"].append(row)
        print(f"io_uring QD{qd}: ours {o:,.0f} IOPS, fio {f:,.0f} IOPS, ratio {o / f:.3f}")
    (d / "fio-compare.dat").unlink(missing_ok=True)

    tmp = d.resolve()
    bins = build_libzmq_perf(Path("build/libzmq-perf"))
    for transport in ("ipc", "tcp") if "zmq" in parts else ():
        ep = f"ipc://{tmp}/cmp.sock" if transport == "ipc" else "tcp://127.0.0.1:5599"
        for n in (64, 65536, 1 << 20):
            ours_st, ours_rt, ref_st, ref_rt = [], [], [], []
            for _ in range(a.rounds):  # alternated, so drift hits both
                ours_st.append(ours_zmq_s(tmp, transport, "stream", n))
                ref_st.append(libzmq_stream_s(bins, ep, n))
                ours_rt.append(ours_zmq_s(tmp, transport, "round-trip", n))
                ref_rt.append(libzmq_round_trip_s(bins, ep, n))
            st, rt = statistics.median(ours_st), statistics.median(ours_rt)
            rst, rrt = statistics.median(ref_st), statistics.median(ref_rt)
            row = {"transport": transport, "bytes": n, "ours_stream_s": ours_st, "libzmq_stream_s": ref_st,
                   "stream_ratio": rst / st, "ours_round_trip_s": ours_rt, "libzmq_round_trip_s": ref_rt,
                   "round_trip_ratio": rrt / rt}  # fmt: skip
            result["zmq"].append(row)
            print(f"zmq {transport} {n:>8} B: stream ours {n / st / 1e9:.3f} vs libzmq {n / rst / 1e9:.3f} "
                  f"GB/s (ratio {rst / st:.2f}); round trip ours {rt * 1e6:.1f} vs libzmq {rrt * 1e6:.1f} us "
                  f"(ratio {rt / rrt:.2f})")  # fmt: skip
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
