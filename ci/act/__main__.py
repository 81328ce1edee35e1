"""`python -m ci.act`: the generated workflows under act (ci/act/run.py; nox -s act)."""
import sys

from ci.act.run import main

if __name__ == "__main__":
    sys.exit(main())
