# shellcheck shell=bash
# Sourced by docker/build.sh and docker/run.sh: one podman invocation for both.
# vfs storage and runc work where overlayfs and crun do not (nested, unprivileged build machines);
# a private --root keeps opforge's images apart from anything else on the machine.
OPFORGE_DOCKER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OPFORGE_REPO=$(dirname "$OPFORGE_DOCKER_DIR")
OPFORGE_PODMAN_ROOT=${OPFORGE_PODMAN_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/opforge/podman}
export CONTAINERS_CONF="$OPFORGE_DOCKER_DIR/containers.conf"

opforge_podman() {
  podman --root "$OPFORGE_PODMAN_ROOT/root" --runroot "$OPFORGE_PODMAN_ROOT/run" \
    --storage-driver=vfs --runtime="$(command -v runc || echo /usr/sbin/runc)" "$@"
}

# The image tag: a hash of what goes into the image, so a stale image is never reused.
opforge_image() {
  local hash
  # (the Dockerfile carries every pin from matrix.yaml; the scripts are what it copies in)
  hash=$(cd "$OPFORGE_REPO" && cat docker/Dockerfile ci/debian.py ci/toolkits.py | sha256sum | cut -c1-12)
  echo "localhost/opforge:$hash"
}

# The Debian release of the base image, read from the generated Dockerfile's FROM line.
opforge_base_image() {
  sed -n 's/^FROM \(localhost\/opforge-base:[a-z]*\).*/\1/p' "$OPFORGE_DOCKER_DIR/Dockerfile"
}
