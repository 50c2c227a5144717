"""python -m cq4p: the command line of `cq4p.cli.main`."""

import sys

from cq4p.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
