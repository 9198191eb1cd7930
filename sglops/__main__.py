"""`python -m sglops`: the `sglops` command without its console script."""

from sglops.cli.program import main

main()
