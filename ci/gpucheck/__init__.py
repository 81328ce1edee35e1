"""The GPU check behind `python3 ci/gpu_check.py` (a bare GPU machine): probe, plan, execute,
report, prepare."""
