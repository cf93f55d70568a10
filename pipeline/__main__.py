"""`python -m pipeline`: the command line of the pipeline (see pipeline/cli/)."""

import sys

from pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
