"""spark-submit entry point of ``onceflow audit`` (the audit then runs in spark-submit's session)::

    spark-submit --py-files my_pipelines.zip <site-packages>/onceflow/ops/audit_submit.py \\
        --pipeline orders --spec my_pipelines.orders:ORDERS --json

Takes ``onceflow audit``'s options; the deployment comes from the environment, as
for the batch job (``onceflow.spark.submit``). Exit code 0: every output equals
its replay; 1: a difference; 2: a configuration error.
"""

import sys

from onceflow.ops.cli import main

if __name__ == "__main__":
    sys.exit(main(["audit", *sys.argv[1:]]))
