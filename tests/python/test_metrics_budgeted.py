"""A measurement in a child held to a node budget: the result and what the budget did come back,
and a failure in the child is one line naming the budget."""

from __future__ import annotations

import math

import pytest

from offload.host import budgets as B
from offload.metrics.budgeted import run_in_budget


def test_the_result_and_the_budget_come_back() -> None:
    budget, value = run_in_budget(B.profile("bluefield2"), "test", math.sqrt, (16.0,), timeout_s=60)
    assert value == 4.0 and budget["profile"] == "bluefield2" and "cpu" in budget


def test_a_failure_in_the_child_names_the_budget() -> None:
    with pytest.raises(RuntimeError, match="the bluefield2 node failed: ValueError: math domain error"):
        run_in_budget(B.profile("bluefield2"), "test", math.sqrt, (-1.0,), timeout_s=60)
