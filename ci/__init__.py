"""opforge's build-and-test tooling, one subpackage per step of the flow:

    model      matrix.yaml read, validated, expanded into cells, stage keys (imports no other)
    provision  venvs, CUDA toolkits, Debian packages, the host probe
    artifacts  wheels repaired and checked, their SASS, package indexes
    engine     the plan (the one skip decision), executors, result cache, the runner
    report     report.json / report.md from the engine's Results (the runner writes it)
    release    nox -s release after the stages; the old-glibc check
    generate   the CI workflows, docker/Dockerfile, docker/apt.lock

No module imports another in a circle (tests/ci/test_layout.py). The modules directly in ci/ are
entry points: bootstrap.py and gpu_check.py (run by path) and the `python -m ci.<name>` commands
the docs, docker/ and the workflows name.
"""
