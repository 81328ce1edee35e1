"""`python -m ci.matrix check|cells` and `from ci import matrix` (fuzz/targets, the docs): the model
of matrix.yaml lives in ci/model/."""
import sys

from ci.model import *  # noqa: F403  (the model's public names, as before)
from ci.model.load import main

if __name__ == "__main__":
    sys.exit(main())
