"""A measurement run in a child process held to a node budget: the child applies the budget (its
own worker processes and threads inherit it), runs the function, and sends back what the budget
did and the result. The embedded side of the MBWU sweep, of the store's placements and of the
services by thread count all run this way."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from offload.host.budgets import Profile

T = TypeVar("T")


def _child(profile: Profile, tag: str, fn: Callable[..., Any], args: tuple[Any, ...], out: Any) -> None:
    from offload.host import budgets as B

    applied = B.apply(profile, tag)
    try:
        out.put({"budget": applied, "result": fn(*args)})
    except Exception as e:  # the parent reports it, in one line
        out.put({"error": f"{type(e).__name__}: {e}"})
    finally:
        B.release(applied)


def run_in_budget(
    profile: Profile, tag: str, fn: Callable[..., T], args: Sequence[Any], timeout_s: float
) -> tuple[dict[str, Any], T]:
    """``fn(*args)`` in a spawned child held to ``profile`` (cgroups named after ``tag``): what
    :func:`offload.host.budgets.apply` did, and the result. ``fn`` and ``args`` must pickle. A
    failure in the child, or no answer within ``timeout_s``, is a RuntimeError naming the budget."""
    ctx = mp.get_context("spawn")  # no thread or handle of this process crosses into the child
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(profile, tag, fn, tuple(args), out))
    p.start()
    try:
        r = out.get(timeout=timeout_s)
    except queue.Empty:
        raise RuntimeError(f"the {profile.name} node did not answer within {timeout_s:.0f} s") from None
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    if "error" in r:
        raise RuntimeError(f"the {profile.name} node failed: {r['error']}")
    return r["budget"], r["result"]
