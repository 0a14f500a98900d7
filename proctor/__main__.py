"""`python -m proctor` runs the `proctor` command line."""

from proctor.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
