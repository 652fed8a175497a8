"""The link between a node and the host, shaped for real: nodes and their clients run inside one
private network namespace that this tool creates, talk over its loopback, and each node's port
gets its own tc class on that loopback (htb for the rate; netem for the delay where the kernel
has it). Every byte stays on the namespace's loopback.

Both directions of a node's traffic (``sport`` or ``dport`` = its port) go through its class,
so the rate is shared by requests and answers and the delay applies each way.

Where the kernel has no netem (this project's VMs: only htb, tbf and pfifo), the delay is not
shaped and :func:`shape` says so; the decision's transfer model then uses the link's measured
latency instead.

Namespaces are named ``offload-NAME`` (:data:`PREFIX`), which is how this tool knows its own:
``offload node netns list`` shows them with the processes inside, ``netns rm`` removes idle ones,
and a command that made one for itself removes it when it ends, if nothing else is inside then.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Link:
    """A link's shape: rate in Mbit/s (None: unshaped) and one-way delay in ms."""

    rate_mbit: float | None = None
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and self.rate_mbit <= 0:
            raise ValueError(f"link rate must be > 0 Mbit/s, got {self.rate_mbit}")
        if self.delay_ms < 0:
            raise ValueError(f"link delay must be >= 0 ms, got {self.delay_ms}")

    @property
    def shaped(self) -> bool:
        return self.rate_mbit is not None or self.delay_ms > 0

    @staticmethod
    def parse(text: str) -> Link:
        """``RATE[,DELAY]``: ``1000mbit,0.5ms``, ``10gbit``, ``none``."""
        if text.strip().lower() in ("", "none"):
            return Link()
        rate, _, delay = text.lower().partition(",")
        units = {"gbit": 1000.0, "mbit": 1.0, "kbit": 0.001}
        for u, mult in units.items():
            if rate.endswith(u):
                try:
                    r = float(rate[: -len(u)]) * mult
                    d = float(delay.removesuffix("ms")) if delay else 0.0
                except ValueError:
                    break
                return Link(r, d)
        raise ValueError(f"link {text!r}: write RATE[,DELAY] like 1000mbit,0.5ms or 10gbit")


PREFIX = "offload-"
"""Every namespace this tool creates is named ``offload-NAME``: ``--netns lab`` means
``offload-lab``, and so does ``--netns offload-lab`` (the prefix is never doubled). Only names
with the prefix are listed or removed by ``offload node netns``."""
ENV = "OFFLOAD_NETNS"
"""Set in a process re-executed inside a namespace (so it does not re-execute again)."""
MADE_ENV = "OFFLOAD_NETNS_MADE"
"""Set (to the namespace) when the command that re-executed itself made the namespace: the
process inside removes it at exit if it is then idle (:func:`remove_at_exit`)."""


def unavailable_reason() -> str | None:
    """Why namespaces and tc cannot be used here, or None where they can."""
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"`{tool}` ({package}) is not installed"
    return None


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10)


def _check(*cmd: str) -> None:
    r = _run(*cmd)
    if r.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}")


def namespace_name(name: str) -> str:
    """The namespace ``--netns name`` means: ``offload-name``, or ``name`` itself where it
    already starts with ``offload-``."""
    if not name or not all(c.isalnum() or c in "_-" for c in name) or len(name) > 40:
        raise ValueError(f"bad namespace name {name!r}: letters, digits, _ and - only, at most 40")
    return name if name.startswith(PREFIX) else PREFIX + name


def exists(name: str) -> bool:
    return Path(f"/run/netns/{namespace_name(name)}").exists()


def ensure_namespace(name: str) -> str:
    """Creates the namespace (if missing) with its loopback up and an htb root; returns its name."""
    ns = namespace_name(name)
    if not exists(ns):
        _check("ip", "netns", "add", ns)
    _check("ip", "-n", ns, "link", "set", "lo", "up")
    if "htb 1:" not in _run("tc", "-n", ns, "qdisc", "show", "dev", "lo").stdout:
        _check("tc", "-n", ns, "qdisc", "replace", "dev", "lo", "root", "handle", "1:", "htb")
    return ns


def remove_namespace(name: str) -> None:
    """Removes the namespace whatever runs inside it (those processes keep it until they end)."""
    ns = namespace_name(name)
    if exists(ns):
        _check("ip", "netns", "del", ns)


def namespaces() -> list[str]:
    """The namespaces this tool made (named ``offload-...``) that exist now, sorted."""
    root = Path("/run/netns")
    return sorted(p.name for p in root.iterdir() if p.name.startswith(PREFIX)) if root.is_dir() else []


def pids(name: str) -> list[int]:
    """The processes inside the namespace (``ip netns pids``: any process whose network namespace
    it is, ``nsenter``'s too); OSError where that cannot be read (not root)."""
    ns = namespace_name(name)
    r = _run("ip", "netns", "pids", ns)
    if r.returncode != 0:
        raise OSError(f"ip netns pids {ns}: {r.stderr.strip() or r.returncode}")
    return sorted(int(p) for p in r.stdout.split())


def remove_if_idle(name: str, ignore: tuple[int, ...] = ()) -> bool:
    """Removes the namespace if no process but those in ``ignore`` and their children is inside
    (from inside, ``ip netns pids`` lists itself: a child, gone by the time it is looked at);
    True if removed."""
    ns = namespace_name(name)
    others = [p for p in pids(ns) if p not in ignore and _parent(p) not in (*ignore, None)]
    if not exists(ns) or others:
        return False
    remove_namespace(ns)
    return True


def _parent(pid: int) -> int | None:
    try:  # /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # gone already


def remove_at_exit(ns: str) -> None:
    """At this process's exit, removes ``ns`` (which the command made) if nothing else is inside
    it then: a node's or a client's namespace does not outlive the command that made it, and one
    another command still uses is left alone. Best effort: a failure is a line on stderr."""
    import atexit

    def release() -> None:
        try:
            if remove_if_idle(ns, ignore=(os.getpid(),)):
                print(f"removed namespace {ns} (made for this command)", file=sys.stderr)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"namespace {ns} left in place: {e}", file=sys.stderr)

    atexit.register(release)


def shape(ns: str, port: int, link: Link) -> dict[str, Any]:
    """Gives ``port``'s traffic in namespace ``ns`` the rate and delay of ``link``; returns what
    was shaped (and why the delay was not, where netem is missing)."""
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    cls = f"1:{port:x}"
    rate = f"{link.rate_mbit}mbit" if link.rate_mbit is not None else "100gbit"
    _check("tc", "-n", ns, "class", "replace", "dev", "lo", "parent", "1:", "classid", cls, "htb",
           "rate", rate, "ceil", rate, "quantum", "65536")  # fmt: skip
    out: dict[str, Any] = {"namespace": ns, "port": port, "rate_mbit": link.rate_mbit, "delay_ms": 0.0}
    if link.delay_ms > 0:
        r = _run("tc", "-n", ns, "qdisc", "replace", "dev", "lo", "parent", cls, "handle", f"{port:x}:",
                 "netem", "delay", f"{link.delay_ms}ms", "limit", "100000")  # fmt: skip
        if r.returncode == 0:
            out["delay_ms"] = link.delay_ms
        else:
            out["delay_reason"] = f"netem is missing in this kernel ({r.stderr.strip()}): delay not shaped"
    _run("tc", "-n", ns, "filter", "del", "dev", "lo", "parent", "1:", "prio", str(port))
    for direction in ("sport", "dport"):
        _check("tc", "-n", ns, "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio",
               str(port), "u32", "match", "ip", direction, str(port), "0xffff", "flowid", cls)  # fmt: skip
    return out


def unshape(ns: str, port: int) -> None:
    """Removes ``port``'s filters and class (best effort)."""
    _run("tc", "-n", ns, "filter", "del", "dev", "lo", "parent", "1:", "prio", str(port))
    _run("tc", "-n", ns, "class", "del", "dev", "lo", "classid", f"1:{port:x}")


def reexec_inside(name: str) -> None:
    """Re-runs this command inside namespace ``name`` (created if missing) unless it already
        runs there; does not return when it re-executes. nsenter enters the network namespace only
        (``ip netns exec`` would also remount /sys and hide the cgroup controllers). A namespace made
    here is removed when the re-executed command ends, if nothing else is inside it then."""
    made = not exists(name)
    ns = ensure_namespace(name)
    if os.environ.get(ENV) == ns:
        if os.environ.pop(MADE_ENV, None) == ns:  # popped: this process's children did not make it
            remove_at_exit(ns)
        return
    os.environ[ENV] = ns
    if made:
        os.environ[MADE_ENV] = ns
    argv = ["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-m", "offload.cli", *sys.argv[1:]]
    os.execvp("nsenter", argv)


VETH_NET = "127.77"
"""The veth pairs of :func:`veth` take /30 blocks of 127.77.0.0/16: loopback addresses only."""


def veth(name: str) -> dict[str, str]:
    """Joins namespace ``name`` (made if missing: ``offload-NAME``) to this process's namespace by
    a veth pair, so that a client inside reaches this namespace's 127.0.0.1 through a network
    device, as a remote client would (the loopback device skips most of the stack). Loopback
    addresses only: this side ``127.77.X.Y+1``, the other ``+2`` (a /30 from the name), with
    ``route_localnet`` on both ends; inside, the loopback has no address and 127.0.0.1/32 is
    routed over the pair, and here the other end's address is routed back over it (its entry in
    the ``local`` table, which holds 127.0.0.0/8). Neighbours are fixed entries (no ARP for
    127/8). Idempotent; the pair goes when the namespace is removed. Returns the device names
    and addresses; OSError where a step fails."""
    ns = namespace_name(name)
    made = not exists(ns)
    if made:
        _check("ip", "netns", "add", ns)
    tag = veth_tag(ns)
    here, there = f"ofh{tag}", f"ofc{tag}"
    block = int(tag, 16) % (1 << 14) * 4  # /30 blocks of 127.77.0.0/16
    base = f"{VETH_NET}.{block >> 8}.{block & 255}"
    mine, theirs = (
        f"{VETH_NET}.{block >> 8}.{(block & 255) + 1}",
        f"{VETH_NET}.{block >> 8}.{(block & 255) + 2}",
    )
    if _run("ip", "link", "show", "dev", here).returncode != 0:  # (not /sys: another namespace's)
        _check("ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
    # Up first: a loopback that comes up without an address is given 127.0.0.1/8 again.
    _check("ip", "-n", ns, "link", "set", "lo", "up")
    _check("ip", "-n", ns, "addr", "flush", "dev", "lo")
    _check("ip", "addr", "replace", f"{mine}/30", "dev", here)
    _check("ip", "-n", ns, "addr", "replace", f"{theirs}/30", "dev", there)
    _check("ip", "link", "set", here, "up")
    _check("ip", "-n", ns, "link", "set", there, "up")
    for where, dev in ((None, here), (ns, there)):
        for conf in ("all", dev):
            _sysctl(where, f"net/ipv4/conf/{conf}/route_localnet", "1")
    mac_here = _run("ip", "-br", "link", "show", here).stdout.split()[2]
    mac_there = _run("ip", "-n", ns, "-br", "link", "show", there).stdout.split()[2]
    _check("ip", "route", "replace", "table", "local", f"{theirs}/32", "dev", here, "src", "127.0.0.1")
    _check("ip", "neigh", "replace", theirs, "lladdr", mac_there, "dev", here, "nud", "permanent")
    _check("ip", "-n", ns, "route", "replace", "127.0.0.1/32", "dev", there, "src", theirs)
    _check(
        "ip", "-n", ns, "neigh", "replace", "127.0.0.1", "lladdr", mac_here, "dev", there, "nud", "permanent"
    )
    return {"namespace": ns, "made": str(made), "device": here, "peer": there, "address": mine,
            "peer_address": theirs, "block": f"{base}/30"}  # fmt: skip


def veth_tag(ns: str) -> str:
    """The 8 hex digits that name namespace ``ns``'s veth pair (``ofhTAG`` here, ``ofcTAG`` there)."""
    import hashlib

    return hashlib.sha256(ns.encode()).hexdigest()[:8]


def _sysctl(ns: str | None, key: str, value: str) -> None:
    """Writes /proc/sys/KEY in namespace ``ns`` (None: here); net.* keys are per namespace."""
    cmd = ["sh", "-c", f"echo {value} > /proc/sys/{key}"]
    _check(*(["nsenter", f"--net=/run/netns/{ns}", *cmd] if ns else cmd))
