"""Particle data flows (seed 003): producers' tables partitioned by id, compressed, and sifted
into id order over LSM trees, on one node under a budget or across many node processes (each an
``offload node serve`` of :mod:`offload.dataservices`), with every row accounted for when a node
dies; and the pipeline model that predicts 100 nodes from a few.

* :mod:`~offload.flows.datasets` — the three data sets (particles, airplanes, ships), the seed's queries;
* :mod:`~offload.flows.partition` — partition by id and sift into id order, under a budget;
* :mod:`~offload.flows.lsm` — the sift's log-structured merge tree of Arrow tables;
* :mod:`~offload.flows.network` — the flow over several nodes: partition and sift services, acked puts;
* :mod:`~offload.flows.run` — running such a flow: start the nodes, put, flush, account for every row;
* :mod:`~offload.flows.pipeline` — the pipeline model, fitted on runs, predicting node counts;
* :mod:`~offload.flows.compression` — where compression pays on a flow;
* :mod:`~offload.flows.gpucodec` — a GPU codec (nvCOMP) for the flows' buffers, where lent;
* :mod:`~offload.flows.cli` — ``offload flows ...``.

Layering: flows uses the query nodes of :mod:`offload.dataservices`; dataservices never imports flows.
"""
