"""The stage engine: the plan (the one decision whether a stage runs, reuses a result or
is skipped, and why), the executors of each stage kind, the result cache and the runner behind
`nox -s matrix/tests/wheels/release/bench`. A stage's outcome is a Result
(ci/report/result.py: the report package owns the type it reports; the engine imports report,
never the other way)."""
