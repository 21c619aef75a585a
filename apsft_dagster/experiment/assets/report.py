"""the experiment report: Markdown and PNG plots through the store, the same in the UI."""

import dagster as dg

from apsft_dagster.assets.common import OWNERS, png_markdown, report_markdown
from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_B_DECISION, report_plot
from apsft_dagster.core.rehearsal import labelled
from apsft_dagster.core.report import build_report, report_summary
from apsft_dagster.experiment.assets.stage_b import stage_b_analysis
from apsft_dagster.resources import ExperimentResource


@dg.asset(deps=[stage_b_analysis], group_name="report", kinds={"markdown"}, owners=OWNERS)
def experiment_report(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """The report a researcher reads at the end: Markdown and PNG plots through the store; in this
    asset's metadata its first screen (`summary`: verdict, Stage A, accuracy plot: it fits the UI's
    dialog, which opens scrolled to its end), the whole Markdown with its plots inline, and the
    accuracy plot."""
    config, store = experiment.config(), experiment.store()
    markdown, plots = build_report(store, config)
    hashes = {name: store.put_bytes(report_plot(name), data) for name, data in plots.items()}
    digest = store.put_bytes(REPORT_MARKDOWN, markdown.encode())
    final = store.get_json(STAGE_B_DECISION)
    verdict = labelled(final["final_verdict"], final)
    context.log.info(f"report: {store.path(REPORT_MARKDOWN)} (verdict {verdict})")
    return dg.MaterializeResult(
        metadata={"verdict": verdict, "path": str(store.path(REPORT_MARKDOWN)),
                  "summary": report_markdown(report_summary(markdown), plots),
                  "report": report_markdown(markdown, plots),
                  "accuracy_plot": png_markdown(plots["accuracy"], "accuracy"), "plots": len(hashes)},
        data_version=dg.DataVersion(digest))
