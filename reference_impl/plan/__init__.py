"""Will my veRL run start? veRL 0.9.1's own placement, run for a declared cluster.

``python -m reference_impl.plan --cluster 2x8x96 trainer.nnodes=2 trainer.n_gpus_per_node=8 ...``
composes veRL's config with the overrides (``config.py``), starts the nodes as a local Ray
cluster with declared resources (``cluster.py``), runs veRL's ``TaskRunnerV1`` on it with
stand-in workers (``simulate.py``, ``inside.py``, ``standins.py``) and prints what Ray placed,
what waits and why (``report.py``). The page is docs/verl/plan.md.
"""
