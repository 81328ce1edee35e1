"""The generated workflows run on this machine under act (`nox -s act`): plan, stand-ins, report.

plan.py reads .github/workflows and says, for every job and step, whether it runs as written, is
replaced (a `uses:` action whose code cannot be had offline, with why) or is skipped (with why);
report.py reads act's JSON log into the same rows, with times; services.py starts the local
stand-ins of GitHub's services (an OCI registry, a podman Docker-API socket, a package index), all
on 127.0.0.1; run.py puts it together (`python -m ci.act`).
"""
