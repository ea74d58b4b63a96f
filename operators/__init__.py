"""Airflow operators and hooks of the platform: thin wrappers that call the stage functions.

- :mod:`operators.stages`: one operator per stage (templated paths and options in, small dicts out);
- :mod:`operators.hooks`: the storage root's layout and its small JSON files;
- :mod:`operators.storage`: S3 credentials from the Airflow connection ``aws_default`` as fsspec options.

Importing these modules imports Airflow's task SDK but none of the data libraries (pyarrow, Dask, datatrove,
torch): DAG files import them on every parse.
"""
