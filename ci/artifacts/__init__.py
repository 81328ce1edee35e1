"""What the builds leave: wheels repaired and checked (manylinux tag, symbols, bundled
runtimes, smoke import), their SASS, and PEP 503 indexes of them."""
