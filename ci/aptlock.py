"""`python -m ci.aptlock` (docker/build.sh) and `python3 ci/aptlock.py check` (docker/Dockerfile):
ci/generate/aptlock.py."""
import sys
from pathlib import Path

if not __package__:   # run by path (python ci/aptlock.py): the repository is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci.generate.aptlock import *  # noqa: F403  (its names, for `from ci import aptlock`)
from ci.generate.aptlock import main

if __name__ == "__main__":
    sys.exit(main())
