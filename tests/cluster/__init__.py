"""Tests on real cluster engines started on loopback by ``tests/cluster/conftest.py``: a one-node Slurm
cluster (slurmctld, slurmd, munged), a throwaway PostgreSQL and an external Dask scheduler with workers.
Where an engine cannot start (not root, no apt-get, no network for the packages) its tests skip and say why."""
