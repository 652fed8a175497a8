"""Shared host helpers at the bottom of the layering: the machine record every benchmark stamps
its figures with, waiting for a child process to say it is ready, and cgroup v1 children.
Nothing here imports a part (rules, serve, recsys, dataservices, metrics, ...); parts import it.
"""
