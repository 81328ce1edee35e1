"""`python -m ci.probe`: what this host has (ci/provision/probe.py)."""
import sys

from ci.provision.probe import main

if __name__ == "__main__":
    sys.exit(main())
