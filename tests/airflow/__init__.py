"""Tests of the Airflow operators (run with the test session's own Airflow home, see tests/dags)."""

import tests.dags  # noqa: F401  (sets AIRFLOW_HOME and friends before Airflow is imported)
