"""`python -m ci.debian`, `python ci/debian.py` (docker/Dockerfile) and `from ci import debian`
(docker/build.sh): ci/provision/debian.py."""
import sys
from pathlib import Path

if not __package__:   # run by path (python ci/debian.py): the repository is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci.provision.debian import *  # noqa: F403  (its names, for `from ci import debian`)
from ci.provision.debian import main

if __name__ == "__main__":
    sys.exit(main())
