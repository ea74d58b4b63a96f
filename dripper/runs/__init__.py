"""The run layer that ``dripper run`` and the Airflow operators share, above the stages and the training
and evaluation layers: :mod:`.corpus` (the corpus build's page stages: their configs, calls and result
dicts) and :mod:`.jobs` (pretraining, scoring and report command lines and results).

Only the standard library is imported at module load; each function imports the layer it runs.
"""
