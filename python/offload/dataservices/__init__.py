"""Near-data services (seed 003): Arrow Flight nodes that own data sets and run Substrait plans
next to the data, or push the data back to the host. The seed's particle data flows, which run
on these nodes, are their own part: :mod:`offload.flows`.

Nodes and queries:

* :mod:`~offload.dataservices.node` — the node (a Flight server) and the services it hosts;
* :mod:`~offload.dataservices.wire` — the protocol: its version, requests and tickets;
* :mod:`~offload.dataservices.serving` — a node as a process: budget, link, token, until a signal;
* :mod:`~offload.dataservices.client` — the host side: SQL to Substrait, queries either way, timings;
* :mod:`~offload.dataservices.plans` — Substrait plans: produce, read, execute (DataFusion);
* :mod:`~offload.dataservices.stats` — column statistics kept with each data set (DataSketches);
* :mod:`~offload.dataservices.estimate` — a plan's result rows and bytes from those statistics;
* :mod:`~offload.dataservices.timemodel` — learned time models and the offload decision;
* :mod:`~offload.dataservices.cluster` — several nodes: partitioned data sets, fanned-out queries;
* :mod:`~offload.dataservices.cases` — the seed's two case studies on a node;
* :mod:`~offload.dataservices.tablefiles` — Parquet and Arrow IPC files, whole and checked;
* :mod:`~offload.dataservices.particles` — the seed's particle tables;
* :mod:`~offload.dataservices.cli` — ``offload node ...``.

Importing this package does not import DataFusion; the modules that need it load it lazily.
"""
