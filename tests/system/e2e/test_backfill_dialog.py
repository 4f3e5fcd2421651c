"""A backfill created the way most users create one: from the Trigger dialog of Airflow's UI, in a
real browser (Debian's chromium driven by Playwright), signed in as an operator.

Input: click events stamped over the three hours before the current one. The
operator opens the hourly interval DAG, picks Backfill, types the first and
the last hour into the dialog's date pickers, chooses "Missing and Errored
Runs" and submits, leaving the dialog's own defaults (unpause on trigger,
the run params form with onceflow's ``replace_committed`` toggle off) as
they are. Airflow's scheduler then runs the backfill beside the scheduled
run of the last hour that unpausing starts.

Asserted: the backfill Airflow recorded is the one typed (range, reprocess
behaviour, created by the operator); every run succeeds; each of the three
hours is committed by exactly one batch; and the audit of the real outputs
finds every input record once. Slow.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from onceflow.core.planning.intervals import Interval
from onceflow.core.states import BatchState
from onceflow.pipeline.runtime import Deployment, PipelineRuntime
from onceflow_devkit.audit.clickstream_audit import audit_clickstream
from onceflow_devkit.local_airflow.auth import auth_env
from onceflow_devkit.local_airflow.rest import AirflowApi
from onceflow_examples.clickstream import CLICKSTREAM_HOURLY
from onceflow_examples.clickstream_data import generate, produce
from tests.system.e2e.conftest import broker_with_topics, hour_with_room, make_world
from tests.system.e2e.test_interval_backfill import wait_until_finished
from tests.system.e2e.browser import SCREENSHOTS, browser_page, chromium, sign_in

DAG_ID = "clickstream_hourly"
H = 3_600_000
PER_HOUR = 40
USERS = {"grace": ("op", "grace-secret"), "harness": ("admin", "harness-secret")}


def pick(dialog, field: str, ms: int) -> None:
    """Type an instant into one of the dialog's date pickers (From, To): its popover's Date and Time,
    in UTC, as the popover says."""
    at = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    dialog.get_by_role("group").filter(has=dialog.page.get_by_text(field, exact=True)).get_by_test_id("datetime-input").click()
    popover = dialog.page.locator('[data-scope="popover"][data-part="content"][data-state="open"]')
    popover.get_by_placeholder("YYYY/MM/DD").fill(at.strftime("%Y/%m/%d"))
    popover.get_by_placeholder("HH:mm").fill(at.strftime("%H:%M"))
    dialog.page.keyboard.press("Escape")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_operator_backfills_three_hours_from_the_trigger_dialog(tmp_path, spark_connect_server, postgres_server,
                                                                   e2e_rest_catalog):
    chromium()
    from playwright.sync_api import expect

    now_hour = hour_with_room(360)  # about the test's length, with room to spare
    t0 = now_hour - 3 * H
    with broker_with_topics() as broker:
        world = make_world(broker, tmp_path, postgres_server, auth_env(tmp_path / "auth", USERS), spark_connect_server,
                           catalog=e2e_rest_catalog)
        runtime = PipelineRuntime(CLICKSTREAM_HOURLY, Deployment(world.warehouse, broker, catalogs=world.catalogs))
        events = generate(3 * PER_HOUR, seed=31, malformed_ratio=0.1)
        produce(broker.config(), "clicks", events, timestamps=[t0 + i * (H // PER_HOUR) for i in range(len(events))])
        produce(broker.config(), "clicks", generate(2, seed=32), timestamps=[now_hour + 1, now_hour + 1])  # closes the hours

        with world.airflow, AirflowApi(world.airflow.api_url, "harness", USERS["harness"][1]) as api:
            api.wait_for_dag(DAG_ID, timeout=180)
            url = world.airflow.api_url
            with browser_page(height=1400) as page:
                sign_in(page, url, "grace", USERS["grace"][1], f"/dags/{DAG_ID}")
                page.wait_for_url(re.compile(rf".*/dags/{DAG_ID}.*"))

                page.get_by_role("button", name="Trigger").first.click()
                dialog = page.locator('[role="dialog"][data-state="open"]')
                dialog.get_by_text("Backfill", exact=True).click()
                expect(dialog.get_by_text(f"Run Backfill - {DAG_ID}")).to_be_visible()
                pick(dialog, "From", t0)
                pick(dialog, "To", t0 + 2 * H)
                dialog.get_by_text("Missing and Errored Runs", exact=True).click()
                expect(dialog.get_by_text("3 runs will be triggered.")).to_be_visible()
                dialog.screenshot(path=str(SCREENSHOTS / "backfill-dialog.png"))
                dialog.get_by_role("button", name="Run Backfill").click()
                expect(page.get_by_text("Backfill generated")).to_be_visible()

            [backfill] = api.backfills(DAG_ID)
            assert backfill["reprocess_behavior"] == "failed", backfill
            assert not (backfill["dag_run_conf"] or {}).get("replace_committed"), backfill  # the param's default
            assert (backfill["from_date"], backfill["to_date"]) == (
                datetime.fromtimestamp(t0 / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z"),
                datetime.fromtimestamp((t0 + 2 * H) / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")), backfill
            api.wait_for_backfill(backfill["id"], timeout=1200)
            runs = wait_until_finished(api, lambda: api.runs(DAG_ID), 3, timeout=600)
            for run in runs:
                assert run["state"] == "success", api.explain(DAG_ID, run["dag_run_id"])
            assert {r["run_type"] for r in runs} <= {"backfill", "scheduled"}

        batches = [s for r in runs if (s := runtime.batch_of_run(r["dag_run_id"])) and s.state is BatchState.COMMITTED]
        assert sorted(s.plan.interval for s in batches) == [Interval(t0 + i * H, t0 + (i + 1) * H) for i in range(3)]
        report = audit_clickstream(runtime)
        assert report.ok, report.summary()
        assert report.committed_batches == 3 and report.input_records == 3 * PER_HOUR, report.summary()
