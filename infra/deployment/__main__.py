"""`python -m infra.deployment up|down|clean|status|chaos [--topology FILE]`: the deployment's command line
(`make pipeline-up`, `make pipeline-down`, `make pipeline-clean`; `status` and `chaos` are also
`python -m pipeline status|chaos`)."""

from __future__ import annotations

import sys

from infra.deployment.cli import main

if __name__ == "__main__":
    sys.exit(main())
