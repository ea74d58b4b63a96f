"""Airflow operators and hooks of the platform: thin wrappers that call the stage functions.

- :mod:`operators.stages`: one operator per stage (templated paths and options in, small dicts out), the
  import path of the DAGs; defined in :mod:`operators.snapshots` (crawls, WARC selection),
  :mod:`operators.corpus` (simplify → extract → refine → tokenize → publish), :mod:`operators.jobs` (long
  jobs in their own processes) and :mod:`operators.base`;
- :mod:`operators.hooks`: the storage root's layout and its small JSON files;
- :mod:`operators.storage`: S3 credentials from the Airflow connection ``aws_default`` as fsspec options.

Importing these modules imports Airflow's task SDK but none of the data libraries (pyarrow, Dask, datatrove,
torch): DAG files import them on every parse.
"""
