"""``python -m infra.docs``: write docs/operations.md from the code; ``--check`` only says whether it is current."""

from __future__ import annotations

import argparse
import sys

from infra.docs.operations import OPERATIONS_DOC, is_current, render_operations

STALE = "docs/operations.md is stale: run make docs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.docs", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/operations.md differs from what the code renders; write nothing")
    arguments = parser.parse_args(argv)
    if arguments.check:
        if is_current():
            return 0
        print(STALE, file=sys.stderr)
        return 1
    OPERATIONS_DOC.write_text(render_operations())
    print(f"wrote {OPERATIONS_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
