"""`python -m ci.toolkits list|probe|provision` (README, docker/Dockerfile): ci/provision/toolkits.py."""
import sys

from ci.provision.toolkits import main

if __name__ == "__main__":
    sys.exit(main())
