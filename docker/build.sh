#!/usr/bin/env bash
# Build opforge's image without pulling anything: debootstrap the Debian release named by
# docker/Dockerfile's FROM line, check the root against docker/apt.lock (part base), import it as
# the base image, then build the Dockerfile (generated from matrix.yaml: python -m ci.workflows
# --update), which installs the locked versions and checks the image (part image). Prints the tag.
#   docker/build.sh
# Knobs: OPFORGE_ENGINE (podman, the default, or docker), OPFORGE_PODMAN_ROOT (private podman
# storage, default ~/.cache/opforge/podman).
set -euo pipefail
# shellcheck source=docker/podman.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman.sh"

base=$(opforge_base_image)
release=${base##*:}
image=$(opforge_image)

import_base() {
  local rootfs="$OPFORGE_PODMAN_ROOT/rootfs-$release" mirror security
  opforge_need debootstrap
  mirror=$(cd "$OPFORGE_REPO" && python3 -c 'from ci import debian; print(debian.mirror())')
  security=$(cd "$OPFORGE_REPO" && python3 -c 'from ci import debian; print(debian.security_mirror())' 2>/dev/null || true)
  rm -rf "$rootfs"
  echo "opforge: debootstrap --variant=minbase $release" >&2
  debootstrap --variant=minbase "$release" "$rootfs" "$mirror" >&2
  # The release's packages as debootstrap installed them, before anything else touches the root.
  (cd "$OPFORGE_REPO" && python3 -m ci.aptlock check --part base --admindir "$rootfs/var/lib/dpkg") \
    || { rm -rf "$rootfs"; return 1; }
  # debootstrap writes only the release itself: add its updates and security fixes.
  echo "deb $mirror $release-updates main" >> "$rootfs/etc/apt/sources.list"
  if [ -n "$security" ]; then
    echo "deb $security $release-security main" >> "$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | opforge_engine import - "$base" >&2
  rm -rf "$rootfs"
}

build_image() {
  local context
  context=$(mktemp -d -t opforge-context.XXXXXX)
  trap 'rm -rf "$context"' RETURN
  # The image needs only the lock, its checker and the toolkit provisioner, not the whole repository.
  mkdir "$context/ci" "$context/docker"
  (cd "$OPFORGE_REPO" && cp --parents "${OPFORGE_IMAGE_SCRIPTS[@]}" "$context/")
  cp "$OPFORGE_REPO"/docker/apt.lock "$context/docker/"
  local secret=()
  # pip inside the build trusts the host's CA bundle (a TLS-inspecting proxy signs PyPI's replies).
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    secret=(--secret "id=hostca,src=/etc/ssl/certs/ca-certificates.crt")
  fi
  local format=()
  # podman: --format docker, as the OCI format ignores SHELL (and with it pipefail)
  [ "$OPFORGE_ENGINE" = podman ] && format=(--format docker)
  echo "opforge: $OPFORGE_ENGINE build $image" >&2
  opforge_engine build "${format[@]}" --network=host "${secret[@]}" \
    -f "$OPFORGE_DOCKER_DIR/Dockerfile" -t "$image" "$context" >&2
}

opforge_image_exists "$base" || import_base
opforge_image_exists "$image" || build_image
echo "$image"
