"""Airflow operators and hooks of the platform: thin wrappers that call the stage functions.

- :mod:`dripper.airflow.stages`: one operator per stage (templated paths and options in, small dicts out), the
  import path of the DAGs; defined in :mod:`dripper.airflow.snapshots` (crawls, WARC selection),
  :mod:`dripper.airflow.corpus` (simplify → extract → refine → tokenize → publish), :mod:`dripper.airflow.jobs` (long
  jobs in their own processes) and :mod:`dripper.airflow.base`;
- :mod:`dripper.airflow.hooks`: the storage root's layout and its small JSON files;
- :mod:`dripper.airflow.storage`: S3 credentials from the Airflow connection ``aws_default`` as fsspec options.

Importing these modules imports Airflow's task SDK but none of the data libraries (pyarrow, Dask, datatrove,
torch): DAG files import them on every parse.
"""
