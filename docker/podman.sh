# shellcheck shell=bash
# Sourced by docker/build.sh and docker/run.sh: one container engine invocation for both.
# OPFORGE_ENGINE=podman (the default) uses vfs storage and runc, which work where overlayfs and
# crun do not (nested, unprivileged build machines), and a private --root that keeps opforge's
# images apart from anything else on the machine; OPFORGE_ENGINE=docker uses docker as it is set up.
OPFORGE_DOCKER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OPFORGE_REPO=$(dirname "$OPFORGE_DOCKER_DIR")
OPFORGE_PODMAN_ROOT=${OPFORGE_PODMAN_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/opforge/podman}
OPFORGE_ENGINE=${OPFORGE_ENGINE:-podman}
export CONTAINERS_CONF="$OPFORGE_DOCKER_DIR/containers.conf"
# The scripts the image copies in, with their folders: the apt lock checker and the toolkit
# provisioner with what they import (ci/generate/dockerfile.py IMAGE_INPUTS lists the same).
OPFORGE_IMAGE_SCRIPTS=(ci/__init__.py ci/aptlock.py ci/debian.py ci/toolkits.py ci/generate/__init__.py ci/generate/aptlock.py ci/provision/__init__.py ci/provision/apt.py ci/provision/debian.py ci/provision/toolkits.py ci/provision/toolkit_install.py ci/provision/toolkit_verify.py ci/model/__init__.py ci/model/checks.py ci/model/errors.py ci/model/expand.py ci/model/keys.py ci/model/load.py ci/model/matrix.py ci/model/schema.py ci/model/toolkit_spec.py ci/model/validate.py ci/model/values.py ci/model/yaml_input.py)
case "$OPFORGE_ENGINE" in
  podman|docker) ;;
  *) echo "opforge: OPFORGE_ENGINE=$OPFORGE_ENGINE: expected podman or docker" >&2; exit 2 ;;
esac

# Fail in one line when a program the container flow needs is missing.
opforge_need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "opforge: $1 is not installed; on Debian: apt-get install -y podman runc debootstrap" >&2
  exit 1
}

# The engine with opforge's settings, into the array OPFORGE_ENGINE_ARGV (podman: the private
# store, vfs and runc; CONTAINERS_CONF, exported above, goes with them).
opforge_engine_argv() {
  case "$OPFORGE_ENGINE" in
    podman)
      OPFORGE_ENGINE_ARGV=(podman --root "$OPFORGE_PODMAN_ROOT/root" --runroot "$OPFORGE_PODMAN_ROOT/run"
        --storage-driver=vfs --runtime="$(command -v runc || echo /usr/sbin/runc)") ;;
    docker)
      OPFORGE_ENGINE_ARGV=(docker) ;;
  esac
}

opforge_engine() {
  opforge_need "$OPFORGE_ENGINE"
  opforge_engine_argv
  "${OPFORGE_ENGINE_ARGV[@]}" "$@"
}

# What opforge_engine ARGS runs, as one line a shell runs as it is (quoted, CONTAINERS_CONF first).
opforge_engine_line() {
  local conf=()
  opforge_engine_argv
  [ "$OPFORGE_ENGINE" = podman ] && conf=("CONTAINERS_CONF=$CONTAINERS_CONF")
  local line
  printf -v line '%q ' "${conf[@]}" "${OPFORGE_ENGINE_ARGV[@]}" "$@"
  echo "${line% }"
}

opforge_image_exists() {
  opforge_engine image inspect "$1" >/dev/null 2>&1
}

# The image tag: a hash of what goes into the image, so a stale image is never reused.
opforge_image() {
  local hash
  # (the Dockerfile carries every pin from matrix.yaml; the lock and scripts are what it copies in)
  hash=$(cd "$OPFORGE_REPO" && cat docker/Dockerfile docker/apt.lock "${OPFORGE_IMAGE_SCRIPTS[@]}" \
    | sha256sum | cut -c1-12)
  echo "localhost/opforge:$hash"
}

# The Debian release of the base image, read from the generated Dockerfile's FROM line.
opforge_base_image() {
  sed -n 's/^FROM \(localhost\/opforge-base:[a-z]*\).*/\1/p' "$OPFORGE_DOCKER_DIR/Dockerfile"
}

# The engine's flags that pass every NVIDIA GPU of the host into a container: docker's --gpus
# (NVIDIA Container Toolkit), podman's CDI device (needs the spec `nvidia-ctk cdi generate` writes).
opforge_gpu_flags() {
  if [ "$OPFORGE_ENGINE" = docker ]; then
    echo "--gpus all"
  else
    echo "--device nvidia.com/gpu=all"
  fi
}

# podman's CDI spec for NVIDIA GPUs, where podman looks for it; fails naming the fix.
opforge_need_cdi_spec() {
  local spec
  for spec in /etc/cdi/nvidia.yaml /etc/cdi/nvidia.json /var/run/cdi/nvidia.yaml /var/run/cdi/nvidia.json; do
    [ -f "$spec" ] && return 0
  done
  echo "opforge: --gpu with podman needs NVIDIA's CDI spec (none in /etc/cdi or /var/run/cdi):" \
    "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (NVIDIA Container Toolkit)," \
    "or OPFORGE_ENGINE=docker for docker's --gpus all" >&2
  exit 1
}
