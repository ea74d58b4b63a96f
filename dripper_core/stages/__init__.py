"""Stage functions: each reads shards (or WARC files) under a run root and writes its own shards.

Every stage follows the contract of :mod:`dripper_core.stages.shards`. Submodules import their heavy
dependencies (pyarrow, Dask, labelers) only when used.
"""
