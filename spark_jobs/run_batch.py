"""spark-submit entry point for deployments that copy folders: the same job as
``onceflow/spark/submit.py`` in the installed package (what the DAG factory
submits). Needs onceflow importable in the driver (``--py-files`` or installed).

    spark-submit --py-files onceflow.zip,my_pipelines.zip spark_jobs/run_batch.py \
        --pipeline orders --batch 7 --spec my_pipelines.orders:ORDERS
"""

import sys

from onceflow.spark.submit import main

if __name__ == "__main__":
    sys.exit(main())
