"""The relative-performance profile (seed 003's RPWU): stress-ng's output parsed, and real stressors
run in processes held to node budgets — a quarter-core quota shows as a quarter of the ops."""

from __future__ import annotations

import pytest

from offload.metrics import rpwu as R

YAML = """---
system-info:
      cpus: 2

metrics:
    - stressor: pipe
      bogo-ops: 10
      bogo-ops-per-second-real-time: 351015.602984
      wall-clock-time: 1.0
    - stressor: matrix
      bogo-ops: 4826
      bogo-ops-per-second-usr-sys-time: 2415.685034
      bogo-ops-per-second-real-time: 2412.792333
...
"""


def test_stress_ngs_yaml_is_read_per_stressor() -> None:
    assert R.parse_ops(YAML, "matrix") == pytest.approx(2412.792333)
    assert R.parse_ops(YAML, "pipe") == pytest.approx(351015.602984)
    assert R.parse_metric(YAML, "matrix", "bogo-ops") == 4826
    with pytest.raises(ValueError, match="no bogo-ops-per-second-real-time for 'udp'"):
        R.parse_ops(YAML, "udp")


def test_output_that_is_not_stress_ngs_yaml_names_the_file() -> None:
    with pytest.raises(ValueError, match=r"^out\.yaml:\d+:\d+: not YAML"):
        R.parse_ops("metrics:\n  - stressor: [pipe\n", "pipe", "out.yaml")
    with pytest.raises(ValueError, match=r"^out\.yaml: no metrics list"):
        R.parse_ops("system-info: {}\n", "pipe", "out.yaml")


def test_unknown_stressors_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown stressor 'nope'"):
        R.run_under("core", "nope", 1)
    with pytest.raises(ValueError, match="whole seconds"):
        R.run_under("core", "pipe", 0)


@pytest.mark.skipif(R.unavailable_reason() is not None, reason=str(R.unavailable_reason()))
def test_a_quarter_core_node_gets_a_quarter_of_the_cpu() -> None:
    """Ratios of ops are the profile; but they move with whatever else shares this machine, so the
    quota itself is checked on stress-ng's own CPU usage, which contention can only lower."""
    r = R.profile(["bluefield2"], ["matrix", "pipe"], seconds=1)
    assert set(r["relative"]) == {"core", "bluefield2"}
    assert r["relative"]["core"] == {"matrix": 1.0, "pipe": 1.0}
    assert 0 < r["summary"]["bluefield2"]["overall"] < 1.0
    one = R.run_under("bluefield2", "matrix", 1)
    if not one["budget"]["cpu"]["method"].startswith("cgroup-v"):
        pytest.skip(f"no CPU quota here: {one['budget']['cpu'].get('reason')}")
    assert 5 < one["cpu_percent"] < 40  # a quarter of a core, give or take the period
