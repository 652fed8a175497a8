"""Near-data services (seed 003): Arrow Flight nodes that own data sets and run Substrait plans
next to the data, or push the data back to the host.

* :mod:`~offload.dataservices.node` — the node (a Flight server) and its request format;
* :mod:`~offload.dataservices.client` — the host side: SQL to Substrait, queries either way, timings;
* :mod:`~offload.dataservices.plans` — Substrait plans: produce, read, execute (DataFusion);
* :mod:`~offload.dataservices.particles` — the seed's particle tables.

Importing this package does not import DataFusion; the modules that need it load it lazily.
"""
