"""The one plotting setup: matplotlib without a display (Agg), loaded only when a figure is drawn
(importing matplotlib costs ~0.3 s, which every CLI call would otherwise pay), with the house
style every part's figures share. Figures are saved whole or not at all by
:func:`offload.files.save_figure`.
"""

from __future__ import annotations

from typing import Any

STYLE = {
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
}
"""Applied once, before the first figure: what every figure of the project has in common."""


def pyplot() -> Any:
    """``matplotlib.pyplot``, on the Agg backend, with :data:`STYLE` applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt
