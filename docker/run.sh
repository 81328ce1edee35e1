#!/usr/bin/env bash
# Run a nox session of this repository inside opforge's image (built on first use by
# docker/build.sh), the repository mounted at /src, with no network.
#   docker/run.sh SESSION [NOX ARGS...]        e.g. docker/run.sh matrix -- --profile host --list
#   docker/run.sh --exec COMMAND [ARGS...]     any command, e.g. docker/run.sh --exec python -m ci.toolkits list
# Options (before SESSION): --wheels DIR  a folder of wheels (`pip download` on the host) that
# pip installs from, offline; --cuda DIR  a host CUDA toolkit mounted read-only at the same path.
set -euo pipefail
# shellcheck source=docker/podman.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"

mounts=(-v "$OPFORGE_REPO:/src" -w /src)
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) mounts+=(-v "$(cd "$2" && pwd):/wheels:ro" -e PIP_NO_INDEX=1 -e PIP_FIND_LINKS=/wheels)
              shift 2 ;;
    --cuda) mounts+=(-v "$2:$2:ro" -e "CUDA_HOME=$2"); shift 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  sed -n '2,7s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
if [ "$1" = --exec ]; then
  shift
  command=("$@")
else
  # Venvs in the container's own folder: the host's .nox venvs hold host paths.
  command=(nox --envdir /opt/opforge/nox -s "$@")
fi

image=$("$OPFORGE_DOCKER_DIR/build.sh")
exec_args=(run --rm --network=none "${mounts[@]}" "$image" "${command[@]}")
echo "opforge: podman ${exec_args[*]}" >&2
opforge_podman "${exec_args[@]}"
