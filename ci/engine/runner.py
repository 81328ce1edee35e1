"""Run a selection of a profile: plan (run / reuse / skip per stage), execute, report.

Every nox session is a selection of this one engine (`nox -s matrix`, `tests`, `wheels`, `bench`).
A stage runs once per key (ci.model.stage_key); other cells with the same key reuse the result.
Stages with `cache: inputs` also keep a pass across runs, keyed by a hash of their sources, knobs
and pins. A failing stage never stops the other cells; stages that need its result are skipped
with the reason.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from ci import model as mx
from ci.engine import cache, executors
from ci.engine.executors import STAGE_TIMEOUT_S, Job, Workspace
from ci.engine.plan import (
    Planned,
    Selection,
    blocked_by,
    plan,
    plan_gathering,
    render_plan,
    select,
)
from ci.engine.settings import (
    NOT_RUN_VARIABLE,
    TIMEOUT_VARIABLE,
    cells_not_run,
    stage_timeout_default,
)
from ci.model import cell_slug, key_hash
from ci.provision import probe as hostprobe
from ci.provision import venvs
from ci.report import report
from ci.report.result import Result  # status pass | fail | skip; a skip's reason in Result.reason

REPO = mx.REPO
OUT = REPO / "build" / "matrix"


@dataclasses.dataclass(frozen=True)
class Engine:
    """What one run works with; the results of the run travel as arguments, never as state."""
    matrix: mx.Matrix
    host: hostprobe.Host
    selection: Selection
    workspace: Workspace
    store: cache.Store
    say: Callable[[str], None] = print
    script_args: tuple[str, ...] = ()   # appended to every script stage's command (nox -s bench)
    jobs: int = 1                         # stage runs side by side (--jobs)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"




def run(engine: Engine) -> dict:
    """Every cell in order, then the gathering stages; the report is rewritten after each cell."""
    cells = engine.selection.cells
    planned = plan(engine.matrix, engine.host, cells, stages=engine.selection.stages,
                   skip_slow=engine.selection.skip_slow)
    done: dict[str, Result] = {}     # key -> the result of its first run in this run
    ahead = run_ahead(engine, planned, done) if engine.jobs > 1 else {}
    rows: list[dict[str, Result]] = []
    for index, (cell, row_plan) in enumerate(zip(cells, planned)):
        engine.say(f"[{engine.elapsed()}] cell {index + 1}/{len(cells)}: {cell.id}")
        row: dict[str, Result] = {}
        for name, item in row_plan.items():
            stage = engine.matrix.stages[name]
            if stage.gather:  # placed by gather(), after the cells
                row[name] = Result.skip("pending", key=item.key)
            elif (index, name) in ahead:
                row[name] = ahead[index, name]
            else:
                row[name] = run_stage(engine, index, cell, stage, item, row, done)
        rows.append(row)
        write(engine, rows)
    return gather(engine, planned, rows, done, ahead)


def run_ahead(engine: Engine, planned: list[dict[str, Planned]],
              done: dict[str, Result]) -> dict[tuple[int, str], Result]:
    """The first run of every key, `engine.jobs` at a time, each as soon as the runs it needs
    have ended: its `after` stages in its cell, or for a gathering stage those of every cell of
    its group. Ready builds go first (each unlocks the most work, and the machine's cores stay
    busy to the end with the short stages). Returns what ran or came from the cache; the cell
    loop then places those and settles the rest (reuse, skips) in order, as without --jobs."""
    owner = first_owners(engine, planned)
    first = needs_of(engine, planned, owner)
    results: dict[tuple[int, str], Result] = {}
    waiting = sorted(first, key=lambda unit: engine.matrix.stages[unit[1]].kind != "build")
    venv_maker = threading.Thread(target=make_venvs, args=(engine, planned, waiting), daemon=True)
    venv_maker.start()
    with ThreadPoolExecutor(engine.jobs) as pool:
        running: dict[Future, tuple[int, str]] = {}
        while waiting or running:
            for unit in [u for u in waiting if ready(u, first, results)][:engine.jobs - len(running)]:
                waiting.remove(unit)
                running[pool.submit(run_first, engine, unit, planned, results, owner, done)] = unit
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                results[running.pop(future)] = future.result()
    venv_maker.join()
    return {unit: r for unit, r in results.items() if r.origin in ("run", "cached")}


def make_venvs(engine: Engine, planned: list[dict[str, Planned]],
               units: list[tuple[int, str]]) -> None:
    """The torch and ORT venvs of `units`, in that order, on a thread of its own: making one is
    mostly download and unpacking (the CUDA torch's: 3 GB, 2 minutes), which need not hold one of
    the --jobs slots. A stage that needs a venv still being made waits for it; one that failed
    here is tried again by its stage, which reports why."""
    ws, cells, made = engine.workspace, engine.selection.cells, set()
    for index, name in units:
        kind = engine.matrix.stages[name].venv
        if kind not in ("torch", "ort") or planned[index][name].action == "skip":
            continue
        path = ws.venv_path(engine.matrix, cells[index], kind)
        if path in made:
            continue
        made.add(path)
        log = ws.out / "logs" / "venvs" / f"{path.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            ws.venv(engine.matrix, cells[index], kind, log)
        except Exception as exc:  # noqa: BLE001 - the stage that needs it says why
            with open(log, "a") as handle:
                handle.write(f"\nopforge matrix: {type(exc).__name__}: {exc}\n")


def first_owners(engine: Engine, planned: list[dict[str, Planned]]) -> dict[str, tuple[int, str]]:
    """{key: (cell index, stage)}: the first cell that runs each key (skips have none)."""
    owner: dict[str, tuple[int, str]] = {}
    for index, row_plan in enumerate(planned):
        for name, item in row_plan.items():
            if item.action != "skip":
                owner.setdefault(item.key, (index, name))
    return owner


def needs_of(engine: Engine, planned: list[dict[str, Planned]],
             owner: Mapping[str, tuple[int, str]]) -> dict[tuple[int, str], list]:
    """{(cell index, stage): the first runs it waits for}, for every first run."""
    cells = engine.selection.cells
    needs = {}
    for index, name in owner.values():
        stage = engine.matrix.stages[name]
        group = [j for j, other in enumerate(cells) if stage.gather and all(
            other.values[a] == cells[index].values[a] for a in stage.depends)] or [index]
        needs[index, name] = [owner[planned[j][b].key] for j in group for b in stage.after
                              if planned[j][b].key in owner]
    return needs


def ready(unit, first, results) -> bool:
    return all(before in results for before in first[unit])


def run_first(engine: Engine, unit: tuple[int, str], planned: list[dict[str, Planned]],
              results: Mapping[tuple[int, str], Result], owner: Mapping[str, tuple[int, str]],
              done: dict[str, Result]) -> Result:
    index, name = unit
    stage, cells = engine.matrix.stages[name], engine.selection.cells

    def result_of(j: int, before: str) -> Result:
        item = planned[j][before]
        return results.get(owner.get(item.key, (-1, ""))) or _reused_input(item, done)

    if stage.gather:
        inputs = gathered(stage, cells[index], cells, [
            {b: result_of(j, b) for b in stage.after} for j in range(len(cells))])
    else:
        inputs = {b: result_of(index, b) for b in stage.after}
    return run_stage(engine, index, cells[index], stage, planned[index][name], inputs, done)


def _reused_input(item: Planned, done: Mapping[str, Result]) -> Result:
    if item.action == "skip":
        return Result.skip(item.reason, key=item.key)
    earlier = done.get(item.key)
    return dataclasses.replace(earlier, origin="reused") if earlier else \
        Result.skip("did not run", key=item.key)


def gather(engine: Engine, planned: list[dict[str, Planned]], rows: list[dict[str, Result]],
           done: dict[str, Result], ahead: Mapping[tuple[int, str], Result]) -> dict:
    """The gathering stages, each over the results of every cell of its group (with --jobs they
    ran already, as soon as their group was done); then the report."""
    cells = engine.selection.cells
    for stage in (engine.matrix.stages[n] for n in engine.selection.stages):
        if not stage.gather:
            continue
        if not any((index, stage.name) in ahead for index in range(len(cells))):
            engine.say(f"[{engine.elapsed()}] {stage.name}: over the {stage.gather} values of each cell")
        for index, (cell, row) in enumerate(zip(cells, rows)):
            if (index, stage.name) in ahead:
                row[stage.name] = ahead[index, stage.name]
                continue
            inputs = gathered(stage, cell, cells, rows)
            row[stage.name] = run_stage(engine, index, cell, stage, planned[index][stage.name],
                                        inputs, done)
    return write(engine, rows)


def run_gathered(engine: Engine, folder: Path) -> dict:
    """Only the gathering stages, over the results of cells run elsewhere (one CI job each): every
    report.json under `folder` (a job's build/matrix/ artifact) gives its cells' results and the
    stage outputs beside it; one merged report is written."""
    found = report.read_runs(folder, engine.selection.profile)
    cells = engine.selection.cells
    planned = plan_gathering(engine.matrix, engine.host, cells, stages=engine.selection.stages)
    rows = merged_rows(engine, planned, found)
    write(engine, rows)
    return gather(engine, planned, rows, {}, {})


def merged_rows(engine: Engine, planned: list[dict[str, Planned]],
                found: Mapping[str, report.Run]) -> list[dict[str, Result]]:
    """Each cell's row from the run that holds it; a key met again is 'reused', as in one run."""
    first: dict[str, tuple[int, Result]] = {}
    rows = []
    left_out = cells_not_run()
    for index, (cell, row_plan) in enumerate(zip(engine.selection.cells, planned)):
        run_of_cell = found.get(cell.id)
        row: dict[str, Result] = {}
        for name, item in row_plan.items():
            if engine.matrix.stages[name].gather:
                row[name] = Result.skip("pending", key=item.key)
            elif run_of_cell is None:
                row[name] = _missing(row, item.key, cell_slug(cell) in left_out)
            elif name not in run_of_cell.results:
                row[name] = Result.skip(f"not run by its CI job ({run_of_cell.path})", key=item.key)
            else:
                row[name] = _placed(run_of_cell, name, index, first)
        rows.append(row)
    return rows


def _missing(row: Mapping[str, Result], key: str, left_out: bool = False) -> Result:
    """A cell whose CI job left no report.json fails once (the report says so), then skips; one
    left out on purpose (OPFORGE_CELLS_NOT_RUN) skips."""
    if left_out:
        return Result.skip(f"its CI job was not run here ({NOT_RUN_VARIABLE})", key=key)
    if not row:
        return Result("fail", key=key, detail="its CI job left no report.json (the job failed "
                      "before writing one, or its artifact was not downloaded)")
    return Result.skip("no results from its CI job", key=key)


def _placed(run_of_cell: report.Run, name: str, index: int,
            first: dict[str, tuple[int, Result]]) -> Result:
    """The cell's result with its output folder where the artifact lies; a key another job ran
    too reads as reused from the first (a gathering stage then sees one output per key)."""
    result = dataclasses.replace(run_of_cell.results[name])
    out = Workspace(run_of_cell.path.parent).work_dir(name, key_hash(result.key))
    if result.status == "pass" and out.is_dir():
        result.outputs = {"out": str(out)}
    if result.origin not in ("run", "cached"):
        return result
    if result.key in first and result.status == first[result.key][1].status:
        earlier_index, earlier = first[result.key]
        return dataclasses.replace(result, origin="reused", first_cell=earlier_index,
                                   duration_s=0.0, cpu_s=0.0, outputs=earlier.outputs)
    first.setdefault(result.key, (index, result))
    result.first_cell = index
    return result


def run_stage(engine: Engine, index: int, cell: mx.Cell, stage: mx.Stage, item: Planned,
              inputs: Mapping[str, Result], done: dict[str, Result]) -> Result:
    """One stage of one cell: skipped, reused from an earlier cell, cached, or executed."""
    result = _outcome(engine, cell, stage, item, inputs, done)
    if result.origin in ("run", "cached"):
        result.key, result.first_cell = item.key, index
        done[item.key] = result
    if result.origin == "run":
        where = f" (cell {index + 1})" if engine.jobs > 1 else ""
        engine.say(f"[{engine.elapsed()}]   {stage.name:15} {result.label}{where} "
                   f"{result.duration_s:.1f}s (cpu {result.cpu_s:.0f}s) {result.detail}".rstrip())
    return result


def _outcome(engine: Engine, cell: mx.Cell, stage: mx.Stage, item: Planned,
             inputs: Mapping[str, Result], done: Mapping[str, Result]) -> Result:
    if item.action == "skip":
        return Result.skip(item.reason, key=item.key)
    reason = blocked_by(stage, {b: inputs[b].status != "pass" for b in stage.after},
                        {b: "failed" if inputs[b].status == "fail" else "did not run"
                         for b in stage.after})
    if reason and stage.gather:
        reason = f"needs {stage.after[0]} passing for >= 2 {stage.gather} values of the group"
    if reason:
        return Result.skip(reason, key=item.key)
    if item.key in done:
        return dataclasses.replace(done[item.key], origin="reused", duration_s=0.0, cpu_s=0.0)
    ws = engine.workspace
    log = ws.log_path(stage.name, key_hash(item.key))
    try:
        args = engine.script_args if stage.kind == "script" else ()
        digest = cache.digest(engine.matrix, cell, stage, item.key, inputs, args)
        kept = engine.store.load(stage, digest)
        if kept is not None:
            return kept
        job = Job(engine.matrix, cell, stage, item.key, digest, inputs, log,
                  ws.work_dir(stage.name, key_hash(item.key)), args)
        result = executors.execute(job, ws)
        engine.store.keep(stage, digest, result)
        return result
    except Exception as exc:  # noqa: BLE001 - a broken stage fails; the run goes on
        return _broken(log, exc)


def _broken(log: Path, exc: Exception) -> Result:
    result = Result("fail", detail=f"{type(exc).__name__}: {exc}"[:2000])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        handle.write(f"\nopforge matrix: {result.detail}\n")
    result.log = str(log.relative_to(REPO)) if log.is_relative_to(REPO) else str(log)
    return result


def gathered(stage: mx.Stage, cell: mx.Cell, cells: tuple[mx.Cell, ...],
             rows: Sequence[Mapping[str, Result]]) -> dict[str, Result]:
    """The inputs of a gathering stage: the passing results of every cell of its group."""
    group = [row for other, row in zip(cells, rows)
             if all(other.values[a] == cell.values[a] for a in stage.depends)]
    inputs = {}
    for before in stage.after:
        outs = sorted({row[before].outputs["out"] for row in group
                       if row[before].status == "pass" and row[before].outputs.get("out")})
        inputs[before] = Result("pass", outputs={"outs": outs, "out": ""}) if len(outs) >= 2 \
            else Result.skip(f"{len(outs)} passing {before} results in the group")
    return inputs


def write(engine: Engine, rows: list[dict[str, Result]]) -> dict:
    selection = engine.selection
    return report.write(engine.workspace.out, profile=selection.profile, matrix=engine.matrix,
                        host=engine.host, cells=selection.cells, rows=rows,
                        excluded=selection.excluded, stages=selection.stages,
                        duration_s=time.monotonic() - engine.started)


@dataclasses.dataclass
class Lock:
    path: Path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"opforge matrix: another matrix run holds {self.path}") from None
        return self

    def __exit__(self, *exc):
        self.handle.close()


# ------------------------------------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="nox -s matrix --", description=__doc__.splitlines()[0])
    cli.add_argument("--profile", default="host", help="a profile of matrix.yaml (default host)")
    cli.add_argument("--list", action="store_true", help="print the cells, what runs, what is "
                     "skipped and why; run nothing")
    cli.add_argument("--only", nargs="+", default=[], metavar="FIELD=VALUE[,VALUE]",
                     help="keep the cells with these axis values and the stages named, e.g. "
                          "torch=2.14.1 ort=1.17.3 stage=unit-ort package=loader")
    cli.add_argument("--cell", metavar="CI_JOB_ID", help="exactly the cell a CI job ran (its id, "
                     "as --list and the workflow show it)")
    cli.add_argument("--skip-slow", action="store_true", help="skip the stages marked slow (bench)")
    cli.add_argument("--fresh", action="store_true", help="re-run every test stage; keep "
                     "only the wheels (built and repaired) and venvs of earlier runs")
    cli.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                     help="stage runs side by side (default: 2, or 1 on a single CPU); stages "
                          "that need another wheel in a shared venv wait for it to be free")
    cli.add_argument("--timeout", type=int, default=stage_timeout_default(), metavar="SECONDS",
                     help=f"limit per stage command (default {STAGE_TIMEOUT_S}, or "
                          f"${TIMEOUT_VARIABLE})")
    cli.add_argument("--out", type=Path, default=OUT, help="where the report, logs, wheels and "
                     "the cache go (default build/matrix)")
    cli.add_argument("--venvs", type=Path, default=venvs.VENVS, help="where the venvs are made "
                     "and reused (default build/venvs)")
    cli.add_argument("--gather-from", type=Path, metavar="DIR", help="run only the gathering "
                     "stages (cross, cross-torch) over the results of cells run elsewhere: every "
                     "report.json under DIR (CI jobs' build/matrix/ artifacts), merged into one "
                     "report")
    cli.add_argument("--script-args", nargs=argparse.REMAINDER, default=[], metavar="ARG",
                     help="(last) arguments appended to every script stage's command")
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        matrix = mx.load()
        selection = select(matrix, args.profile, only=args.only, cell_id=args.cell,
                           skip_slow=args.skip_slow)
    except mx.MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
    host = hostprobe.probe(matrix)
    if args.list:
        print(hostprobe.render(host))
        print(render_plan(matrix, selection, plan(matrix, host, selection.cells,
                                                  stages=selection.stages,
                                                  skip_slow=selection.skip_slow)))
        return 0
    out = args.out.resolve()
    with Lock(out / ".lock"):
        print(hostprobe.render(host), flush=True)
        say = lambda text: print(text, flush=True)  # noqa: E731
        workspace = Workspace(out, venv_root=args.venvs.resolve(), timeout_s=args.timeout, say=say)
        engine = Engine(matrix, host, selection, workspace,
                        cache.Store(out / "cache", fresh=args.fresh), say,
                        tuple(args.script_args), max(1, args.jobs))
        try:
            data = run_gathered(engine, args.gather_from) if args.gather_from else run(engine)
        except report.ReportError as exc:
            print(exc, file=sys.stderr)
            return 2
    for line in report.summary_lines(data, matrix):
        print(line, flush=True)
    return report.exit_code(data)


if __name__ == "__main__":
    sys.exit(main())
