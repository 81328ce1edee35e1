"""What a run needs on this machine: venvs, CUDA toolkits, Debian packages (and the ORT
headers from one), the host probe, the wheels a container run installs. Imports only ci.model.

Nothing is imported here: ci/provision/debian.py and ci/provision/apt.py run with the standard
library alone (docker/build.sh calls them before any venv exists).
"""
