"""Fixtures of the kernel tests."""
from opforge_spec.testing import run_once  # noqa: F401  (a fixture: builds shared by xdist workers)
