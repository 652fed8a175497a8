"""offload: run data services on accelerators and near-data devices, and know when that pays.

The rule engine lives in :mod:`offload.rules`; the command line in :mod:`offload.cli`.
"""

from offload._native import __version__

__all__ = ["__version__"]
