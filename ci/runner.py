"""`python -m ci.runner`: the stage engine (ci/engine/runner.py)."""
import sys

from ci.engine.runner import main

if __name__ == "__main__":
    sys.exit(main())
