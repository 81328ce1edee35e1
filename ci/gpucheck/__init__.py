"""The GPU check behind `python3 ci/gpu_check.py` (a bare GPU machine): probe, plan, execute,
report, prepare; folders (what it may write) and carried (what --prepare recorded, verified).
Standard library only, but prepare (--prepare reads matrix.yaml)."""
