"""ci/gpu_check.py's trust: the folders it writes (OUT, --work, --prepare DIR) are refused where
they are a file, hold the repository or hold files it did not write, and it only ever empties a
folder it marked as its own; the carried folder is trusted only as --prepare recorded it (sha256 of
every file, nothing unlisted); and the check runs under a python with the standard library and
torch alone (statically: what it imports; and for real: a venv holding torch only).

The commands that could delete files run in a copy of ci/, bench/ and kernels/ (the check's
repository is the one its file lies in), never in this checkout."""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

COPIED = ("ci", "bench", "kernels")
SPEC_WHEEL = "opforge_spec-0.1.0-py3-none-any.whl"
MARKER = ".opforge-gpu-check"   # what the check writes into a folder it made its own


def gpucheck(name: str):
    """A module of ci/gpucheck (imported by the tests that use it: the others run the command)."""
    return importlib.import_module(f"ci.gpucheck.{name}")


def test_the_marker_is_the_checks_own():
    assert gpucheck("folders").MARKER == MARKER


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """A repository the check may be pointed at: ci/, bench/ and kernels/ copied."""
    root = tmp_path_factory.mktemp("repo")
    for name in COPIED:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def tree(folder: Path) -> dict:
    """Every file under folder with its bytes' sha256: what must come out unchanged."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def gpu_check(root: Path, *args, python: str = sys.executable, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(root / "ci" / "gpu_check.py"), *map(str, args)], cwd=root,
                          capture_output=True, text=True, timeout=300, env=env)


def refused(done: subprocess.CompletedProcess, words: str) -> bool:
    """Exit 2 with one line on stderr that holds `words`, no traceback."""
    lines = done.stderr.strip().splitlines()
    return (done.returncode == 2 and len(lines) == 1 and words in lines[0]
            and "Traceback" not in done.stdout + done.stderr)


# -------------------------------------------------------------------- 3: OUT, --work, --prepare

def test_out_that_is_the_repository_is_refused_and_its_bench_kept(repo_copy, tmp_path):
    before = tree(repo_copy / "bench")
    done = gpu_check(repo_copy, ".", "--work", tmp_path / "work", "--carried", tmp_path / "c")
    assert refused(done, "holds the repository"), done.stderr
    assert tree(repo_copy / "bench") == before and not (repo_copy / MARKER).exists()


@pytest.mark.parametrize("where", ["bench", "kernels/opforge_spec", "ci/.."])
def test_out_inside_the_repository_over_tracked_files_is_refused(repo_copy, tmp_path, where):
    before = tree(repo_copy)
    done = gpu_check(repo_copy, repo_copy / where, "--work", tmp_path / "work")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert tree(repo_copy) == before


def test_a_users_folder_as_out_is_refused_and_its_bench_kept(repo_copy, tmp_path):
    out = tmp_path / "mine"
    (out / "bench").mkdir(parents=True)
    (out / "bench" / "notes.md").write_text("my notes")
    done = gpu_check(repo_copy, out, "--work", tmp_path / "work", "--carried", tmp_path / "c")
    assert refused(done, "holds files gpu-check did not write"), done.stderr
    assert (out / "bench" / "notes.md").read_text() == "my notes"


def test_a_users_folder_as_work_is_refused_and_kept(repo_copy, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "thesis.tex").write_text("years")
    done = gpu_check(repo_copy, tmp_path / "out", "--work", work, "--carried", tmp_path / "c")
    assert refused(done, "--work"), done.stderr
    assert (work / "thesis.tex").read_text() == "years" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("out,work", [("out", "."), ("out", "out/bench"), ("out/work", "out")])
def test_work_that_holds_the_carried_folder_or_overlaps_out_is_refused(repo_copy, tmp_path, out, work):
    done = gpu_check(repo_copy, tmp_path / out, "--work", tmp_path / work, "--carried", tmp_path / "c")
    assert refused(done, "--work"), done.stderr
    assert not (tmp_path / "out").exists()


def test_out_a_file_and_prepare_a_file_end_in_one_line(repo_copy, tmp_path):
    report = tmp_path / "report.txt"
    report.write_text("keep")
    for args in ([report], ["--prepare", report], [report / "below"], ["--prepare", report / "below"]):
        done = gpu_check(repo_copy, *args, "--work", tmp_path / "work")
        assert refused(done, "not a folder"), (args, done.stderr)
    assert report.read_text() == "keep" and not (tmp_path / "work").exists()


def test_prepare_into_a_users_folder_is_refused(repo_copy, tmp_path):
    mine = tmp_path / "mine"
    (mine / "wheels").mkdir(parents=True)
    (mine / "wheels" / "keep.whl").write_bytes(b"mine")
    done = gpu_check(repo_copy, "--prepare", mine)
    assert refused(done, "holds files gpu-check did not write"), done.stderr
    assert (mine / "wheels" / "keep.whl").read_bytes() == b"mine"


def test_a_folder_the_check_wrote_is_written_again_and_only_its_own_files_replaced(repo_copy, tmp_path):
    out = tmp_path / "out"
    args = ("--work", tmp_path / "work", "--carried", tmp_path / "c")
    first = gpu_check(repo_copy, out, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    (out / "mine.txt").write_text("kept")
    (out / "bench").mkdir()
    (out / "bench" / "bench.json").write_text("{stale")
    again = gpu_check(repo_copy, out, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (out / "mine.txt").read_text() == "kept" and not (out / "bench").exists()
    assert {p.name for p in out.iterdir()} == {MARKER, "mine.txt", "check.log", "report.json",
                                              "report.md"}


# ------------------------------------------------------------ 13: what --prepare carried, hashed

def carried_folder(root: Path) -> Path:
    """A carried folder as --prepare leaves it: wheels, ORT headers, carried.json with hashes."""
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / SPEC_WHEEL).write_bytes(b"spec wheel")
    (root / "ort-include").mkdir()
    (root / "ort-include" / "onnxruntime_c_api.h").write_text("/* the C API */")
    gpucheck("carried").record(root, ["opforge-spec"])
    return root


def test_prepare_records_the_sha256_of_every_file_it_carries(tmp_path):
    folder = carried_folder(tmp_path / "c")
    data = json.loads((folder / "carried.json").read_text())
    assert data["files"][f"wheels/{SPEC_WHEEL}"] == hashlib.sha256(b"spec wheel").hexdigest()
    assert set(data["files"]) == {f"wheels/{SPEC_WHEEL}", "ort-include/onnxruntime_c_api.h"}
    found = gpucheck("carried").verify(folder)
    assert found.wheels == (SPEC_WHEEL,) and found.ort_include == str(folder / "ort-include")


@pytest.mark.parametrize("change,words", [
    (lambda f: (f / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"x"),
     "wheels/evil-1.0-py3-none-any.whl is not listed"),
    (lambda f: (f / "wheels" / SPEC_WHEEL).write_bytes(b"changed"),
     f"wheels/{SPEC_WHEEL}: its sha256 is not the one"),
    (lambda f: (f / "ort-include" / "onnxruntime_c_api.h").unlink(),
     "ort-include/onnxruntime_c_api.h is listed in"),
    (lambda f: (f / "carried.json").write_text("{"), "carried.json is not"),
    (lambda f: (f / "carried.json").unlink(), "holds files but no carried.json"),
])
def test_a_carried_folder_unlike_its_record_is_refused(tmp_path, change, words):
    folder = carried_folder(tmp_path / "c")
    change(folder)
    with pytest.raises(gpucheck("common").UsageError, match=r"^--carried") as err:
        gpucheck("carried").verify(folder)
    assert words in str(err.value)


def test_the_check_refuses_an_unlisted_wheel_before_it_plans_anything(repo_copy, tmp_path):
    folder = carried_folder(tmp_path / "c")
    (folder / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"x")
    dry = gpu_check(repo_copy, "--dry-run", "--carried", folder)
    assert refused(dry, "evil-1.0-py3-none-any.whl is not listed"), dry.stdout + dry.stderr
    run = gpu_check(repo_copy, tmp_path / "out", "--work", tmp_path / "w", "--carried", folder)
    assert refused(run, "evil-1.0-py3-none-any.whl is not listed"), run.stdout + run.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()


def test_no_carried_folder_is_nothing_carried(tmp_path):
    carried = gpucheck("carried")
    assert carried.verify(tmp_path / "absent") == carried.Carried()
    (tmp_path / "empty").mkdir()
    assert carried.verify(tmp_path / "empty") == carried.Carried()


# ---------------------------------------------------------------- 4: the standard library + torch

# Imported by the GPU check, but only inside a function, where the run can do without them.
LAZY = {
    "ci.gpucheck.prepare": "--prepare runs where there is a network and the toolchain "
                           "(matrix.yaml through ci.model and pydantic)",
    "opforge_bench": "the report's bench targets: without its numpy the report says why it "
                     "lists none",
}


def repo_module(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported(path: Path) -> list:
    """(module, at module level) for every import in the file, parent packages included."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        names: list = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if repo_module(f"{node.module}.{a.name}")
                     else node.module for a in node.names]
        for name in names:
            parts = name.split(".")
            found.extend((".".join(parts[:i]), not in_function) for i in range(1, len(parts) + 1))
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return found


def outside_stdlib_and_torch(start: Path) -> list:
    """What the modules reached from `start` import beyond the standard library and torch."""
    seen, todo, wrong = set(), [start], []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name, top_level in imported(path):
            lazy = next((m for m in LAZY if name == m or name.startswith(m + ".")), None)
            if lazy:
                if top_level:
                    wrong.append(f"{path.relative_to(REPO)} imports {name} at module level")
            elif (found := repo_module(name)) is not None:
                todo.append(found)
            elif name.split(".")[0] not in (*sys.stdlib_module_names, "torch"):
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    return sorted(set(wrong))


def test_the_gpu_check_imports_only_the_standard_library_and_torch():
    assert outside_stdlib_and_torch(REPO / "ci" / "gpu_check.py") == []


def test_the_import_walk_finds_what_is_beyond_the_standard_library():
    found = outside_stdlib_and_torch(REPO / "ci" / "model" / "load.py")
    assert any("pydantic" in line for line in found), found


def torch_only_requirements(name: str) -> list:
    """name's distribution and what it requires (no extras), transitively, as installed here."""
    seen: dict = {}
    todo = [name]
    while todo:
        dist = todo.pop().lower().replace("_", "-")
        if dist in seen:
            continue
        try:
            meta = seen[dist] = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue   # a requirement for another python (markers are not evaluated)
        for req in meta.requires or ():
            if "extra ==" not in req:
                todo.append(req.split(";")[0].split("[")[0].split("<")[0].split(">")[0]
                            .split("=")[0].split("!")[0].split("~")[0].strip())
    return list(seen.values())


@pytest.fixture(scope="module")
def torch_only_python(tmp_path_factory) -> str:
    """A venv holding the standard library and torch (with what torch requires), nothing else:
    torch's installed files linked into its site-packages."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this python: nothing to link into a torch-only venv")
    root = tmp_path_factory.mktemp("torch-only")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in torch_only_requirements("torch"):
        top = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for name in top:
            source = Path(str(dist.locate_file(name)))
            if source.exists() and not (site / name).exists():
                (site / name).symlink_to(source)
    return str(python)


def torch_only_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def test_the_torch_only_venv_holds_torch_and_no_pydantic(torch_only_python):
    code = ("import torch, importlib.util as u; "
            "print(u.find_spec('pydantic'), u.find_spec('yaml'), u.find_spec('pytest'))")
    done = subprocess.run([torch_only_python, "-c", code], capture_output=True, text=True, env=torch_only_env(), timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["None", "None", "None"], done.stderr


def test_the_check_runs_under_the_standard_library_and_torch_alone(torch_only_python, repo_copy,
                                                                    tmp_path):
    env = torch_only_env()
    nothing = tmp_path / "nothing-carried"
    dry = gpu_check(repo_copy, "--dry-run", "--carried", nothing, python=torch_only_python, env=env)
    assert dry.returncode == 0 and "build-torch" in dry.stdout, dry.stdout + dry.stderr
    out = tmp_path / "out"
    run = gpu_check(repo_copy, out, "--work", tmp_path / "work", "--carried", nothing,
                    python=torch_only_python, env=env)
    assert run.returncode == 0 and "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
    data = json.loads((out / "report.json").read_text())
    assert data["status"] == "skipped" and data["machine"]["torch"]
    assert "No module named 'numpy'" in data["targets_unlisted"]   # the bench's report needs it
    text = (out / "report.md").read_text()
    assert "# opforge GPU check: nothing ran" in text and "No target is listed: " in text
    folder = carried_folder(tmp_path / "c")
    dry = gpu_check(repo_copy, "--dry-run", "--carried", folder, python=torch_only_python, env=env)
    assert dry.returncode == 0 and f"carried wheels ({SPEC_WHEEL})" in dry.stdout, dry.stderr
    prepare = gpu_check(repo_copy, "--prepare", folder / "wheels" / SPEC_WHEEL,
                        python=torch_only_python, env=env)
    assert refused(prepare, "not a folder"), prepare.stderr
