"""Resources chosen per environment in one place."""

from apsft_dagster.resources.experiment import ExperimentResource

__all__ = ["ExperimentResource"]
