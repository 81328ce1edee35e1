"""The local stand-ins of GitHub's services, each a real server on 127.0.0.1 started for one act run:

- an OCI registry for ghcr.io: Debian's `docker-registry` (the CNCF distribution registry), its
  storage under OUT/registry; podman and the docker client reach it over plain HTTP (a
  registries.conf.d drop-in marks it insecure for podman, docker treats 127.0.0.0/8 so itself);
- a Docker-API socket for act's container jobs: `podman system service` with docker/podman.sh's
  settings (vfs, runc) over a private store under OUT/podman, which pulls from that registry;
- a package index for PyPI: pypiserver (matrix.yaml's pin), uploads without authentication.

Programs a run needs and the machine lacks are installed with apt (Debian), saying so first.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCALHOST = "127.0.0.1"
REGISTRY_PORT = 5000
INSECURE_DROP_IN = Path("/etc/containers/registries.conf.d/50-opforge-act.conf")
# Debian package of each program the image and container jobs need on the runner imitation.
APT = {"sudo": "sudo", "podman": "podman", "runc": "runc", "debootstrap": "debootstrap",
       "docker-registry": "docker-registry"}


class ServiceError(Exception):
    """A service did not come up; str() says which and where its log is."""


def say(message: str) -> None:
    print(f"opforge act: {message}", file=sys.stderr, flush=True)


def ensure_programs(programs: Iterable[str]) -> None:
    """apt-get install the Debian packages of the missing programs (root), or fail naming them."""
    missing = sorted({APT[name] for name in programs if shutil.which(name) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServiceError(f"missing {', '.join(missing)}: on Debian, as root: apt-get install -y "
                           f"{' '.join(missing)}")
    say(f"installing {' '.join(missing)} with apt-get (the image and container jobs need them)")
    for command in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", *missing]):
        if subprocess.run(command, stdout=subprocess.DEVNULL).returncode != 0:
            raise ServiceError(f"{' '.join(command)} failed")


def ensure_docker_client() -> None:
    if shutil.which("docker") is None:
        raise ServiceError("the image job calls the docker client (as GitHub's runners have it): "
                           "install one (Debian: apt-get install docker.io), no daemon is used")


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log: Path
    address: str
    before_stop: Callable[[], None] | None = None  # what to undo while the service still runs

    def stop(self) -> None:
        """End the service's process group (it was started in a session of its own)."""
        if self.before_stop is not None:
            self.before_stop()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def _start(name: str, command: list[str], log: Path, env: Mapping[str, str] | None = None
           ) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def _wait(service: Service, ready, seconds: float = 60) -> Service:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise ServiceError(f"{service.name} exited ({service.process.returncode}): {service.log}")
        if ready():
            say(f"{service.name} serves {service.address} (log {service.log})")
            return service
        time.sleep(0.5)
    service.stop()
    raise ServiceError(f"{service.name} did not come up within {seconds:.0f} s: {service.log}")


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((LOCALHOST, port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOCALHOST, 0))
        return int(probe.getsockname()[1])


def registry_config(storage: Path, port: int) -> str:
    return ("version: 0.1\n"
            "log: {level: info}\n"
            f"storage:\n  filesystem: {{rootdirectory: {storage}}}\n  delete: {{enabled: true}}\n"
            f"http: {{addr: '{LOCALHOST}:{port}'}}\n")


def insecure_drop_in(address: str) -> str:
    return f'[[registry]]\nlocation = "{address}"\ninsecure = true\n'


def start_registry(out: Path, port: int = REGISTRY_PORT) -> Service:
    if _port_open(port):
        raise ServiceError(f"{LOCALHOST}:{port} is taken: stop what serves it, or pass "
                           f"--registry-port")
    # podman's Docker-API login skips TLS only for a registry named localhost:PORT (it ignores
    # registries.conf there): the registry serves 127.0.0.1 and goes by that name
    address = f"localhost:{port}"
    config = out / "registry" / "config.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(registry_config(out / "registry" / "data", port))
    INSECURE_DROP_IN.parent.mkdir(parents=True, exist_ok=True)
    INSECURE_DROP_IN.write_text(insecure_drop_in(address))
    say(f"{INSECURE_DROP_IN}: podman may push to and pull from {address} over HTTP")
    process = _start("registry", ["docker-registry", "serve", str(config)],
                     out / "logs" / "registry.log")
    return _wait(Service("OCI registry (docker-registry)", process, out / "logs" / "registry.log",
                         address), lambda: _port_open(port))


def start_podman_socket(out: Path) -> Service:
    """podman's Docker API for act's container jobs, over a private store under OUT/podman."""
    sock = out / "podman.sock"
    sock.unlink(missing_ok=True)
    # opforge_engine is a shell function: bash stays the parent, stop() ends the whole group
    script = 'source docker/podman.sh && opforge_engine system service --time=0 "unix://$0"'
    command = ["bash", "-c", script, str(sock)]
    log = out / "logs" / "podman-service.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "OPFORGE_PODMAN_ROOT": str(out / "podman")},
                                   start_new_session=True)
    return _wait(Service("podman Docker-API socket", process, log, f"unix://{sock}",
                         before_stop=lambda: remove_containers(out)), sock.exists)


def remove_containers(out: Path) -> None:
    """Every container act left in the private store (it keeps a failed job's running, holding
    mounts under OUT): removed, so that nothing of the run keeps running after the command."""
    script = "source docker/podman.sh && opforge_engine rm --all --force --time 0"
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPFORGE_PODMAN_ROOT": str(out / "podman")})
    if done.returncode != 0:
        say(f"could not remove the job containers in {out / 'podman'}: {done.stderr.strip()[-300:]}")


def start_index(out: Path, pypi_server: str) -> Service:
    """pypiserver over OUT/index: /simple/ to install from, / to upload to (no authentication)."""
    port = free_port()
    packages = out / "index"
    shutil.rmtree(packages, ignore_errors=True)
    packages.mkdir(parents=True)
    log = out / "logs" / "index.log"
    process = _start("index", [pypi_server, "run", "-i", LOCALHOST, "-p", str(port), "-a", ".",
                               "-P", ".", "--overwrite", str(packages)], log)
    return _wait(Service("package index (pypiserver)", process, log,
                         f"http://{LOCALHOST}:{port}"), lambda: _port_open(port))
