"""`python -m pipeline`: the command line of the pipeline (see pipeline/cli/)."""

import sys

if __name__ == "__main__":
    try:
        from pipeline.cli import main

        code = main()
    except KeyboardInterrupt:
        # Ctrl-C before a subcommand took over (while importing or parsing): no traceback.
        code = 130
    sys.exit(code)
