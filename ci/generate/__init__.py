"""The files generated from matrix.yaml: the CI workflows, docker/Dockerfile and
docker/apt.lock (`python -m ci.workflows --update|--check`, `nox -s apt_lock`)."""
