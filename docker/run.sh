#!/usr/bin/env bash
# Run a nox session of this repository inside opforge's image (built on first use by
# docker/build.sh), the repository mounted at /src, with no network.
#   docker/run.sh SESSION [NOX ARGS...]        e.g. docker/run.sh matrix -- --profile host --list
#   docker/run.sh --exec COMMAND [ARGS...]     any command, e.g. docker/run.sh --exec python -m ci.toolkits list
# Options (before SESSION): --wheels DIR  a folder of wheels pip installs from, offline (`python3
# ci/bootstrap.py -s container_wheels -- PROFILE` fills build/container-wheels); --cuda DIR  a host
# CUDA toolkit mounted read-only at the same path; --gpu  every NVIDIA GPU passed in (also
# OPFORGE_GPU=1); --dry-run  print the engine command, to paste, building and running nothing.
set -euo pipefail
# shellcheck source=docker/podman.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"

# The engine's venvs in a folder of the container's own: a venv holds absolute paths (its scripts'
# shebangs), so one made at /src is broken at the host's checkout path and the reverse.
# OPFORGE_NETWORK=none: what fails for want of a download says so (ci/provision/venvs.py, toolkits).
mounts=(-v "$OPFORGE_REPO:/src" -w /src -e OPFORGE_VENVS=/src/build/container-venvs
        -e OPFORGE_NETWORK=none)
wheels=""
gpu=${OPFORGE_GPU:-0}
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) [ -d "${2:-}" ] || { echo "opforge: --wheels ${2:-}: not a folder (python3 ci/bootstrap.py -s container_wheels -- PROFILE makes build/container-wheels)" >&2; exit 2; }
              wheels=$(cd "$2" && pwd)
              mounts+=(-v "$wheels:/wheels:ro" -e PIP_NO_INDEX=1 -e PIP_FIND_LINKS=/wheels)
              shift 2 ;;
    --cuda) mounts+=(-v "$2:$2:ro" -e "CUDA_HOME=$2"); shift 2 ;;
    --gpu) gpu=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  sed -n '2,10s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
if [ "$1" = --exec ]; then
  shift
  command=("$@")
else
  # Venvs in the container's own folder: the host's .nox venvs hold host paths.
  command=(nox --envdir /opt/opforge/nox -s "$@")
  [ -n "$wheels" ] || echo "opforge: no --wheels: the container runs with --network=none, so pip" \
    "installs nothing there; a session that builds or tests needs the pins first:" \
    "python3 ci/bootstrap.py -s container_wheels -- PROFILE, then docker/run.sh --wheels" \
    "build/container-wheels $*" >&2
fi
# Without a wheel folder pip fails at once (no index to retry), and the stage says why.
[ -n "$wheels" ] || mounts+=(-e PIP_NO_INDEX=1)

gpu_flags=()
if [ "$gpu" = 1 ]; then
  read -r -a gpu_flags <<< "$(opforge_gpu_flags)"
  [ "$OPFORGE_ENGINE" = podman ] && [ "$dry_run" = 0 ] && opforge_need_cdi_spec
fi
if [ "$dry_run" = 1 ]; then
  image=$(opforge_image)
else
  image=$("$OPFORGE_DOCKER_DIR/build.sh")
fi
exec_args=(run --rm --network=none "${gpu_flags[@]}" "${mounts[@]}" "$image" "${command[@]}")
# the whole command, the engine's private settings included: pasted into a shell, it runs as is
echo "opforge: $(opforge_engine_line "${exec_args[@]}")" >&2
[ "$dry_run" = 1 ] && exit 0
opforge_engine "${exec_args[@]}"
