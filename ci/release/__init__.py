"""The release after the stages (`nox -s release`): dist/, one index per variant, a smoke
test from each, and the default variant on an older glibc."""
