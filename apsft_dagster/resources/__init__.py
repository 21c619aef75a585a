"""Resources chosen per environment in one place."""

from apsft_dagster.resources.experiment import ExperimentResource
from apsft_dagster.resources.generation import GenerationResource
from apsft_dagster.resources.scoring import ScoringResource
from apsft_dagster.resources.training import TrainingResource


def resources_for(experiment: ExperimentResource) -> dict:
    """Every wing's resources over one experiment resource (its profile, config file and store)."""
    return {"experiment": experiment, "generator": GenerationResource(experiment=experiment),
            "scorer": ScoringResource(experiment=experiment), "trainer": TrainingResource(experiment=experiment)}


__all__ = ["ExperimentResource", "GenerationResource", "ScoringResource", "TrainingResource", "resources_for"]
