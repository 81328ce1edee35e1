"""`python -m ci.workflows --update|--check` (README, the workflows): ci/generate/workflows.py."""
import sys

from ci.generate.workflows import main

if __name__ == "__main__":
    sys.exit(main())
