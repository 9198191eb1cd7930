"""`python -m sglops`: the `sglops` command without its console script."""

from sglops.cli.program import main

if __name__ == "__main__":
    main()
