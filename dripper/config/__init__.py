"""Typed configs read by every front end (Python, the ``dripper`` CLI, the Airflow forms).

Modules here import only the standard library and pydantic, so DAG files may import them at parse time.
"""
