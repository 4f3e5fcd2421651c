"""A Spark job whose every write task dies on its first attempt, mid-file.

Run by test_file_sink_datasource.py in its own process: retries need a
``local[2,3]`` master (3 attempts per task) and a process has one SparkContext.

    python -m tests.integration.spark.retry_job <sink uri> <vote path> <rows> <partitions>

The failing writer is the real ``StagedParquetWriter``; only its input
iterator is wrapped to raise after the first Arrow batch of attempt 0, so
the first attempt leaves a real partial staged file behind (an orphan).
"""

from __future__ import annotations

import sys

from pyspark import TaskContext

from onceflow.sinks.files.data_source import OnceflowFilesDataSource, StagedParquetWriter

FLAKY_FORMAT = "onceflow_files_flaky_first_attempt"


class FlakyFirstAttemptWriter(StagedParquetWriter):
    def stage(self, batches, task):
        if TaskContext.get().attemptNumber() > 0:
            return super().stage(batches, task)

        def dies_after_first_batch():
            yield next(batches)
            raise RuntimeError("injected failure of a first task attempt, mid-file")

        return super().stage(dies_after_first_batch(), task)


class FlakyFilesDataSource(OnceflowFilesDataSource):
    format = FLAKY_FORMAT
    writer_type = FlakyFirstAttemptWriter


def main(sink_uri: str, vote_path: str, rows: int, partitions: int) -> None:
    from onceflow.spark.local_session import local_spark

    # Small Arrow batches so that every partition reaches the writer in several.
    spark = local_spark("onceflow-retry-job", master="local[2,3]",
                        **{"spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    spark.dataSource.register(FlakyFilesDataSource)
    df = spark.range(rows, numPartitions=partitions).selectExpr("id", "id * 2 AS doubled")
    (df.write.format(FLAKY_FORMAT).mode("append")
       .option("sink", "numbers").option("path", sink_uri).option("batch_seq", "3").option("attempt", "1")
       .option("vote_path", vote_path).save())
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
