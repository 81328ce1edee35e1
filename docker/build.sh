#!/usr/bin/env bash
# Build opforge's image without pulling anything: debootstrap the Debian release named by
# docker/Dockerfile's FROM line, import it as the base image, then `podman build` the Dockerfile
# (generated from matrix.yaml: python -m ci.workflows --update). Prints the image tag.
#   docker/build.sh
# Knobs: OPFORGE_PODMAN_ROOT (private podman storage, default ~/.cache/opforge/podman).
set -euo pipefail
# shellcheck source=docker/podman.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"

base=$(opforge_base_image)
release=${base##*:}
image=$(opforge_image)

import_base() {
  local rootfs="$OPFORGE_PODMAN_ROOT/rootfs-$release" mirror security
  mirror=$(cd "$OPFORGE_REPO" && python3 -c 'from ci import debian; print(debian._mirror())')
  security=$(sed -n 's/^URIs: *\(.*security.*\)/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  rm -rf "$rootfs"
  echo "opforge: debootstrap --variant=minbase $release" >&2
  debootstrap --variant=minbase "$release" "$rootfs" "$mirror" >&2
  # debootstrap writes only the release itself: add its updates and security fixes.
  echo "deb $mirror $release-updates main" >> "$rootfs/etc/apt/sources.list"
  if [ -n "$security" ]; then
    echo "deb $security $release-security main" >> "$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | opforge_podman import - "$base" >&2
  rm -rf "$rootfs"
}

build_image() {
  local context
  context=$(mktemp -d -t opforge-context.XXXXXX)
  trap 'rm -rf "$context"' RETURN
  # The image needs only the toolkit provisioner, not the whole repository.
  mkdir "$context/ci"
  cp "$OPFORGE_REPO"/ci/debian.py "$OPFORGE_REPO"/ci/toolkits.py "$context/ci/"
  local secret=()
  # pip inside the build trusts the host's CA bundle (a TLS-inspecting proxy signs PyPI's replies).
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    secret=(--secret "id=hostca,src=/etc/ssl/certs/ca-certificates.crt")
  fi
  echo "opforge: podman build $image" >&2
  # --format docker: the OCI format ignores SHELL (and with it pipefail)
  opforge_podman build --format docker --network=host "${secret[@]}" -f "$OPFORGE_DOCKER_DIR/Dockerfile" \
    -t "$image" "$context" >&2
}

opforge_podman image exists "$base" || import_base
opforge_podman image exists "$image" || build_image
echo "$image"
