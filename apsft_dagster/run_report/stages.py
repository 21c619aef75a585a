"""The RL run report's stages: one run per registered run folder (the inbox sensor requests it),
then its SQL audits. `apsft rl-report add NAME FOLDER` runs these by hand."""

from apsft_dagster.assets.audits import place_audits
from apsft_dagster.core.run_report.names import GROUP
from apsft_dagster.run_report.assets import rl_run_evidence, run_report
from apsft_dagster.stage import Stage

RUN_REPORT_STAGES = place_audits((
    Stage("run_report_job", (rl_run_evidence, run_report)),
    Stage("run_report_audits_job", (), hosts_audits=True),
), ran_by="`apsft rl-report add NAME FOLDER` (the RL run report), not by the experiment's `apsft run`",
   group=GROUP)
