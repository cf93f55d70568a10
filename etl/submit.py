"""The ETL's entry for spark-submit: ``spark-submit [--master URL] etl/submit.py load --zookeeper ... --warehouse ...``.

spark-submit runs a file, not a module, so the project's root is put on the path first; the command line is
then ``python -m etl``'s, and spark-submit's ``--master`` and ``--conf`` decide the Spark settings.
"""

import sys
from pathlib import Path


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from etl.__main__ import main as etl_main

    return etl_main()


if __name__ == "__main__":
    sys.exit(main())
