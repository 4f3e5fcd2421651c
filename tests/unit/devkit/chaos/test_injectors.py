"""How the injectors recognise their victims among an Airflow home's processes
(pure logic on command lines as /proc shows them; the real kills run in
test_chaos_run.py)."""

from __future__ import annotations

from onceflow_devkit.chaos.injectors import _TASK_TITLE, _is_python_worker, _is_spark_submit

SPARK_SUBMIT = (
    "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /venv/lib/python3.11/site-packages/pyspark/conf:/x/jars/* "
    "-Xmx1g org.apache.spark.deploy.SparkSubmit --master local[2] --py-files /tmp/onceflow-onceflow-0-abc.zip /venv/lib/python3.11/site-packages/onceflow/spark/submit.py"
)
DRIVER = "/venv/bin/python3 /venv/lib/python3.11/site-packages/onceflow/spark/submit.py --pipeline clickstream --batch 3"
DAEMON = "/venv/bin/python3 -m pyspark.daemon"
DATA_SOURCE_WORKER = "/venv/bin/python3 -m pyspark.sql.worker.write_into_data_source"
TASK = "airflow worker -- 01a20216-3eda-771f-9484-52509be30a68"
EXECUTOR_WORKER = "airflow worker -- LocalExecutor: 01a20216-3eda-771f-9484-52509be30a68"


def test_spark_submit_is_the_jvm_running_sparksubmit_only():
    assert _is_spark_submit(SPARK_SUBMIT)
    assert not any(_is_spark_submit(c) for c in (DRIVER, DAEMON, DATA_SOURCE_WORKER, TASK))


def test_python_workers_are_pyspark_processes_but_not_the_jvm_or_the_driver():
    assert _is_python_worker(DAEMON) and _is_python_worker(DATA_SOURCE_WORKER)
    assert not any(_is_python_worker(c) for c in (SPARK_SUBMIT, DRIVER, TASK))


def test_a_task_process_title_gives_its_task_instance_id_and_executor_workers_do_not_match():
    match = _TASK_TITLE.match(TASK)
    assert match and match.group(1) == "01a20216-3eda-771f-9484-52509be30a68"
    assert _TASK_TITLE.match(EXECUTOR_WORKER) is None
    assert _TASK_TITLE.match("airflow worker -- LocalExecutor: <idle>") is None


def test_every_fault_kind_the_schedule_draws_has_an_injector():
    from onceflow_devkit.chaos import schedule
    from onceflow_devkit.chaos.injectors import INJECTORS

    assert set(INJECTORS) == set(schedule.KNOWN_KINDS)
