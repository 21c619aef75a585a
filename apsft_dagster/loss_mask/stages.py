"""The loss-mask curation's stages: one run per registered dataset version, then its SQL audits.
`apsft loss-mask run NAME` runs these; `apsft run` does not."""

from apsft_dagster.assets.audits import place_audits
from apsft_dagster.core.loss_mask.names import GROUP
from apsft_dagster.loss_mask.assets import lm_build, lm_census, lm_verify
from apsft_dagster.loss_mask.pack import lm_pack, lm_pack_comparison
from apsft_dagster.stage import Stage

LOSS_MASK_STAGES = place_audits((
    Stage("loss_mask_job", (lm_census, lm_build, lm_verify, lm_pack, lm_pack_comparison)),
    Stage("loss_mask_audits_job", (), hosts_audits=True),
), ran_by="`apsft loss-mask run NAME` (the loss-mask curation), not by the experiment's `apsft run`",
   group=GROUP)
