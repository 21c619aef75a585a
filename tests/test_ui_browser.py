"""`apsft ui` and the Dagster UI in a real browser, over the session's finished smoke run plus one
tampered rerun (one `dagster dev` start-up for all of it).

What a person sees: every asset group in the lineage, `trace_bank`'s partitions and their status,
a check that passed and then failed (a score shard changed after it was written), the audit
table of `audit_fallback_gaps`, the report's plots decoded in its Markdown dialog, an adapter
partition's own loss curve in place, and a catalog with nothing missing; what the server shows a
client: the headless runs under their job and code location; and that SIGTERM to `apsft ui` ends
every process it started.
APSFT_SAVE_SCREENSHOTS=1 writes the README's screenshots into docs/screenshots/; otherwise they
go to the test's tmp folder.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import dagster as dg
import pytest

from apsft_dagster.core.paths import PROJECT_ROOT, store_instance
from apsft_dagster.experiment.stages import STAGES
from browser import Page, alive, chromium, listening_addresses, served_ui

pytestmark = pytest.mark.after_the_run  # a copy of the run, processes of its own (tests/conftest.py)

JOB_RUNS = ("""{ pipelineOrError(params: {pipelineName: "tasks_and_model_job", repositoryName: "__repository__",
  repositoryLocationName: "apsft_dagster.definitions"}) { ... on Pipeline { runs { runId } } """
            """... on PythonError { message } } }""")
TIMELINE = """{ runsOrError { ... on Runs { results { runId repositoryOrigin { repositoryLocationName }
  tags { key value } } } } }"""
TAMPERED_STAGE = "score_bank_index_job"  # the cheapest stage whose blocking check reads every score shard
CHECKED = "score_bank_index"


@pytest.fixture
def tampered_state(cli_run, tmp_path):
    """A copy of the session run's state folder and store in which one score shard changed after it
    was written, and `apsft run` reran only the score bank index over it: its `hash_parity` check
    passed in the first run and fails in this one. Returns (state folder, tampered shard)."""
    _, store, state = cli_run
    copy_state, copy_store = tmp_path / "state", tmp_path / "store"
    shutil.copytree(state, copy_state)
    shutil.copytree(store.root, copy_store)
    # the copy's own instance (one per store) starts as the original's: state folder and store copied as one
    store_instance(store.root, copy_state).rename(store_instance(copy_store, copy_state))
    shard = sorted((copy_store / "score_bank" / "shards").glob("*.parquet"))[0]
    with open(shard, "ab") as f:
        f.write(b"tampered")
    env = {**os.environ, "APSFT_STATE_DIR": str(copy_state)}
    for name in ("APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR", "DAGSTER_HOME"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--store", str(copy_store),
                           "--from", TAMPERED_STAGE, "--to", TAMPERED_STAGE], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT)
    assert proc.returncode == 1 and f"check {CHECKED}:hash_parity failed" in proc.stdout, proc.stdout + proc.stderr
    return copy_state, shard


def _screenshots(tmp_path):
    if os.environ.get("APSFT_SAVE_SCREENSHOTS") == "1":
        folder = PROJECT_ROOT / "docs" / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path


def _fallback_gaps(store):
    """The audit recomputed from the store (its SQL over the files), not read back from Dagster."""
    from apsft_dagster.core.audits import discover, run_audit

    return run_audit(next(a for a in discover() if a.name == "fallback_gaps"), store)


def _cell(value):
    """What a table cell showing `value` must read: floats to their precision, the rest as text."""
    return pytest.approx(value, rel=1e-12) if isinstance(value, float) else str(value)


def _sees_every_group_in_the_lineage(page: Page) -> None:
    from apsft_dagster.definitions import WINGS

    groups = sorted({g for wing in WINGS for a in wing.assets for g in a.group_names_by_key.values()})
    page.open("/asset-groups")  # the global lineage: one box per group, drawn in the graph's SVG
    assert page.shown("//*[local-name()='svg']//div[@data-tooltip]", groups, order=sorted) == groups
    assert len(groups) >= 10
    page.screenshot("lineage")


def _sees_trace_bank_partitions_materialized(page: Page) -> None:
    from apsft_dagster.definitions import defs

    keys = defs.resolve_assets_def("trace_bank").partitions_def.get_partition_keys()
    page.open("/assets/trace_bank?view=partitions")
    counts = {f"Materialized ({len(keys)})", "Failed (0)", "Missing (0)"}  # the status filters' counts
    assert counts <= page.lines(counts)
    # each partition in the list, with its status dot beside it (green: materialized)
    listed = "//div[@data-tooltip][following-sibling::div[1][contains(@style, 'border-radius')]]"
    assert page.shown(listed, keys, attribute="data-tooltip") == keys
    dots = page.read(f"{listed}/following-sibling::div[1]", attribute="style")
    assert [re.search(r"--color-accent-(\w+)", d).group(1) for d in dots] == ["green"] * len(keys)
    page.screenshot("trace_bank_partitions")


def _sees_a_check_pass_then_fail(page: Page, shard) -> None:
    page.open(f"/assets/{CHECKED}?view=checks&checkDetail=hash_parity")
    latest = "//div[@title='{0}']/following-sibling::span"  # the check list: name, then its latest result
    assert page.shown(latest.format("hash_parity"), ["Failed"]) == ["Failed"]
    assert page.shown(latest.format("finite_values"), ["Succeeded"]) == ["Succeeded"]
    page.element(f"//*[contains(text(), '{shard}')]")  # the failed evaluation names the changed shard
    page.element("//*[normalize-space()='Execution history']", clickable=True).click()
    history = "//table[.//th[normalize-space()='Evaluation result']]/tbody/tr/td[1]"
    assert page.shown(history, ["Failed", "Passed"]) == ["Failed", "Passed"]  # newest first: the tampered rerun
    page.screenshot("check_passed_then_failed")


def _sees_the_audit_table(page: Page, store) -> None:
    from selenium.webdriver.common.by import By

    audit = _fallback_gaps(store)
    page.open("/assets/audit_fallback_gaps")
    table = page.element(f"//table[thead/tr/th[normalize-space()='{audit.columns[0]}']]")  # metadata "result"
    header = [th.text for th in table.find_elements(By.XPATH, "./thead/tr/th")]
    rows = [[float(td.text) if isinstance(v, float) else td.text
             for td, v in zip(tr.find_elements(By.XPATH, "./td"), audit.row(i))]
            for i, tr in enumerate(table.find_elements(By.XPATH, "./tbody/tr"))]
    assert header == audit.columns and audit.height > 0
    assert rows == [[_cell(v) for v in row] for row in audit.iter_rows()]
    page.screenshot("audit_fallback_gaps", element=table)


def _dialog_images(page: Page, count: int) -> list[list]:
    """Wait until the open dialog shows `count` images, each decoded; return [alt, width, height] of each."""
    from selenium.common.exceptions import TimeoutException

    script = ("return Array.from(document.querySelectorAll('[role=dialog] img'))"
              ".map(i => [i.alt, i.complete ? i.naturalWidth : 0, i.complete ? i.naturalHeight : 0])")
    with contextlib.suppress(TimeoutException):
        page.wait.until(lambda d: len(d.execute_script(script)) == count
                        and all(w > 0 for _, w, _ in d.execute_script(script)))
    return page.driver.execute_script(script)


def _sees_the_report_with_its_plots(page: Page) -> None:
    """The report's Markdown dialog shows every plot, decoded (they are inline: a relative link would
    resolve against the UI's page and break)."""
    from apsft_dagster.core.report import PLOTS

    page.open("/assets/experiment_report")
    # the summary opens whole, the verdict in view (the dialog opens scrolled to its end, where the
    # focused Close button is: the whole report opens at its plots)
    page.element("//tr[td[normalize-space()='summary']]//*[contains(text(), 'Show Markdown')]", clickable=True).click()
    assert [alt for alt, _, _ in _dialog_images(page, 1)] == ["accuracy"]
    verdict = page.element("//*[@role='dialog']//li[contains(., 'Final verdict')]")
    top, bottom = page.driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom]",
                                             verdict)
    assert 0 <= top and bottom <= page.driver.execute_script("return window.innerHeight"), (top, bottom)
    opaque = "return getComputedStyle(document.querySelector('[role=dialog]')).opacity === '1'"
    page.wait.until(lambda d: d.execute_script(opaque))  # the dialog's fade-in has ended
    page.screenshot("report_summary")
    page.element("//*[@role='dialog']//button[normalize-space()='Close']", clickable=True).click()
    page.element("//tr[td[normalize-space()='report']]//*[contains(text(), 'Show Markdown')]", clickable=True).click()
    images = _dialog_images(page, len(PLOTS))
    assert [alt for alt, _, _ in images] == list(PLOTS) and all(w >= 320 and h >= 180 for _, w, h in images), images
    plot = page.element("//*[@role='dialog']//img[@alt='accuracy']")
    page.screenshot("report_plots", element=plot)


# into view vertically only: every box above it back at its left edge, as a person sees the page
SCROLL_TO = ("arguments[0].scrollIntoView({block: arguments[1]});"
             "for (let e = arguments[0]; e; e = e.parentElement) e.scrollLeft = 0")


def _sees_stage_a_tables_whole(page: Page) -> None:
    """Stage A's widest tables fit the page where a materialization is read (its Events view, the
    metadata's full width): transposed (one column per policy or arm) and the policies split in
    two, every column inside the window and every box that clips it (one table of seven policy
    columns was cut); the base accuracy reads to 4 places, not 17."""
    page.open("/assets/stage_a_analysis?view=events")
    # the right edge of the last column's text (a table box may stretch past what it draws)
    fits = ("const t = arguments[0], range = document.createRange();"
            "const right = Math.max(...Array.from(t.querySelectorAll('tr > :last-child')).map(c => {"
            "  range.selectNodeContents(c); return range.getBoundingClientRect().right; }));"
            "let inside = right <= window.innerWidth;"
            "for (let e = t.parentElement; e; e = e.parentElement) {"
            "  if (getComputedStyle(e).overflowX !== 'visible') inside &&= right <= e.getBoundingClientRect().right;"
            "}"
            "return [t.querySelectorAll('thead th').length, inside]")
    # a field column, then: base + the two treatments / the four controls / the two potential arms
    for name, columns in (("policies_treatments", 4), ("policies_controls", 5), ("conditions", 3)):
        table = page.element(f"//tr[td[normalize-space()='{name}']]/td//table")
        page.driver.execute_script(SCROLL_TO, table, "center")
        assert page.driver.execute_script(fits, table) == [columns, True], name
    [accuracy] = page.read("//tr[td[normalize-space()='base_core_iid_accuracy']]/td[2]")
    assert re.fullmatch(r"0\.\d{1,4}|[01]", accuracy.strip()), accuracy
    first = page.element("//tr[td[normalize-space()='policies_treatments']]")
    page.driver.execute_script(SCROLL_TO, first, "start")
    page.screenshot("stage_a_tables")


def _sees_a_loss_curve_on_an_adapter_partition(page: Page) -> None:
    """The partition's own curve in place on its page (an inline SVG, no click), and its full plot
    with every trained segment one click away."""
    policy = "answer_potential-seed42"
    page.open(f"/assets/adapters?view=partitions&partition={policy}")
    inline = page.element("//tr[td[normalize-space()='loss_curve']]//img")
    script = "const i = arguments[0]; return [i.alt, i.complete ? i.naturalWidth : 0, i.src.slice(0, 19)]"
    page.wait.until(lambda d: d.execute_script(script, inline)[1] > 0)
    assert page.driver.execute_script(script, inline) == [policy, 240, "data:image/svg+xml,"]
    page.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", inline)
    page.screenshot("adapter_loss_curve_inline")
    page.element("//tr[td[normalize-space()='loss_curve_plot']]//*[contains(text(), 'Show Markdown')]",
                 clickable=True).click()
    images = _dialog_images(page, 1)
    assert images[0][0] == policy and images[0][1] >= 320, images  # this partition's own curve
    page.screenshot("adapter_loss_curve")


CATALOG = """{ assetNodes { assetKey { path } groupName
  partitionStats { numMaterialized numPartitions numFailed numMaterializing }
  assetMaterializations(limit: 1) { timestamp } } }"""


def _sees_a_finished_catalog(page: Page, port: int) -> None:
    """After the smoke run every asset of the experiment is materialized, and no partitioned one
    has a missing partition: the partition sets hold what the run planned (the seed-43 and Stage B
    sets are empty when Stage A's verdict is final), and the sibling systems' audits sit in their
    own groups. The counts are those the catalog's status column draws."""
    groups = {g for stage in STAGES for a in stage.assets for g in a.group_names_by_key.values()}
    nodes = [n for n in _graphql(port, CATALOG)["assetNodes"] if n["groupName"] in groups]
    assert len(nodes) == len({a.key for stage in STAGES for a in stage.assets})  # every experiment asset
    unfinished = []
    for node in nodes:
        stats, name = node["partitionStats"], "/".join(node["assetKey"]["path"])
        if stats is None and not node["assetMaterializations"]:
            unfinished.append(f"{name}: never materialized")
        elif stats is not None:
            done = stats["numMaterialized"] + stats["numFailed"] + stats["numMaterializing"]
            if stats["numPartitions"] - done or stats["numFailed"]:
                unfinished.append(f"{name}: {stats['numMaterialized']} materialized, {stats['numFailed']} failed "
                                  f"of {stats['numPartitions']}")
    assert unfinished == []
    page.open("/assets")
    policies = len(defs_partition_keys("adapters"))
    assert f"{policies} partitions" in page.lines({f"{policies} partitions"})  # the adapters row: Stage A's six
    page.screenshot("catalog")


def defs_partition_keys(asset: str) -> list[str]:
    from apsft_dagster.definitions import defs

    return defs.resolve_assets_def(asset).partitions_def.get_partition_keys()


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=10).read())["data"]


LAUNCH = """mutation($params: ExecutionParams!) { launchPipelineExecution(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
RUN = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status jobName tags { key value } } } }"""


def _launches_a_stage_asset_as_its_stage_does(port: int, home) -> None:
    """The asset page's Materialize, as the UI sends it (the implicit asset job, one partition), on
    an engine asset: the run carries its stage's engine tag, succeeds with the same checks as the
    stage's run, and records the same metadata (the merge and probe kept, so no timing differs)."""
    policy = "answer_potential-seed42"
    params = {"selector": {"repositoryLocationName": "apsft_dagster.definitions", "repositoryName": "__repository__",
                           "pipelineName": "__ASSET_JOB", "assetSelection": [{"path": ["merged_models"]}]},
              "executionMetadata": {"tags": [{"key": "dagster/partition", "value": policy}]}}
    launched = _graphql(port, LAUNCH, {"params": params})["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id, deadline, run = launched["run"]["runId"], time.monotonic() + 180, {}
    while run.get("status") not in ("SUCCESS", "FAILURE", "CANCELED") and time.monotonic() < deadline:
        time.sleep(1)
        run = _graphql(port, RUN, {"id": run_id})["runOrError"]
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert (run["status"], run["jobName"], tags.get("apsft/engine")) == ("SUCCESS", "__ASSET_JOB", "true"), run
    with _instance(home) as instance:
        stage_run = instance.get_runs(dg.RunsFilter(job_name="merged_models_job"))[-1].run_id  # `apsft run`'s
        checks = {r: sorted((e.dagster_event.event_specific_data.check_name, e.dagster_event.event_specific_data.passed)
                            for e in instance.all_logs(r, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION))
                  for r in (run_id, stage_run)}
        metadata = {r: _partition_metadata(instance, r, policy) for r in (run_id, stage_run)}
    assert checks[run_id] == checks[stage_run] == [("deployment_probe", True), ("merge_pairs", True)]
    assert metadata[run_id] == metadata[stage_run] and "fingerprint" in metadata[run_id]


def _partition_metadata(instance, run_id: str, partition: str) -> dict:
    """What one run recorded for one partition, but its `action` (merged or kept) and the run's count
    of `policies` (one here, six in the stage's run)."""
    [event] = [e.dagster_event for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
               if e.dagster_event.partition == partition]
    metadata = event.event_specific_data.materialization.metadata
    return {k: v for k, v in metadata.items() if k not in ("action", "policies")}


@contextlib.contextmanager
def _instance(home):
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            yield instance
    finally:
        os.environ.pop("DAGSTER_HOME") if previous is None else os.environ.__setitem__("DAGSTER_HOME", previous)


def _shows_headless_runs_under_their_job_and_location(port: int, cli_proc) -> None:
    """The Jobs page's data: the headless `apsft run` runs belong to the UI's code location."""
    runs, deadline = None, time.monotonic() + 60
    while runs is None and time.monotonic() < deadline:  # the code location loads after the server starts
        found = _graphql(port, JOB_RUNS)["pipelineOrError"] or {}
        if "runs" in found:
            runs = found["runs"]
        else:
            time.sleep(1)
    assert runs is not None and len(runs) == 1  # the Jobs page lists the headless run under its job
    timeline = _graphql(port, TIMELINE)["runsOrError"]["results"]
    ran = [line for line in cli_proc.stdout.splitlines() if line.split()[:1] and line.split()[0].endswith("_job")
           and line.split()[1] == "ok"]  # every stage that ran (a skipped stage starts no run)
    assert len(ran) <= len(STAGES)
    origins = [r["repositoryOrigin"]["repositoryLocationName"] for r in timeline]
    assert origins == ["apsft_dagster.definitions"] * (len(ran) + 1)  # + the tampered rerun
    ours = {t["key"] for r in timeline for t in r["tags"] if t["key"].startswith(("apsft/", "dagster-k8s/"))}
    assert ours == {"apsft/runner", "apsft/engine"}  # a local run: the runner, the engine flag, no GPU request


@pytest.mark.slow
def test_a_person_sees_every_group_the_partitions_a_passed_then_failed_check_and_an_audit_table(
        cli_run, tampered_state, tmp_path):
    """Also `apsft ui` itself: loopback only, telemetry off, headless runs under their job, and
    SIGTERM to it (as a service manager sends) ends the webserver, daemon and code servers."""
    state, shard = tampered_state
    store = shard.parents[2]  # the tampered rerun's store: UI launches run over it
    home = store_instance(store, state)  # its own instance, which `apsft ui` opens
    # the browser first: a missing one fails at once
    with chromium() as driver, served_ui(state, store=str(store)) as (port, proc):
        assert listening_addresses(port) == {"127.0.0.1"}  # `apsft ui` binds loopback unless told otherwise
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10).read()
        assert b"dagster_webserver_version" in body
        instance_yaml = (home / "dagster.yaml").read_text()
        assert "telemetry:\n  enabled: false" in instance_yaml and "nux:\n  enabled: false" in instance_yaml
        page = Page(driver, port, _screenshots(tmp_path))
        _sees_every_group_in_the_lineage(page)
        _sees_trace_bank_partitions_materialized(page)
        _sees_a_check_pass_then_fail(page, shard)
        _sees_the_audit_table(page, cli_run[1])
        _sees_the_report_with_its_plots(page)
        _sees_stage_a_tables_whole(page)
        _sees_a_loss_curve_on_an_adapter_partition(page)
        _sees_a_finished_catalog(page, port)
        _shows_headless_runs_under_their_job_and_location(port, cli_run[0])
        _launches_a_stage_asset_as_its_stage_does(port, home)
        assert alive(port)
        proc.send_signal(signal.SIGTERM)  # to `apsft ui` alone, as a service manager would
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(port)  # webserver, daemon and code servers all gone
