"""Run the stale stages of the DVC pipeline on a Dask cluster (``python -m stages.cluster repro``).

``dag`` reads the DAG and the stale set from DVC's public CLI output and orders it; ``execute``
runs each stage as ``dvc --wait-for-lock repro --single-item STAGE`` on Dask workers sharing
the workspace; ``backends`` builds the cluster (local, external scheduler, SLURM);
``lockorder`` keeps the order of new dvc.lock entries independent of completion order.
"""
