"""Resources chosen per environment in one place."""

from apsft_dagster.resources.experiment import ExperimentResource
from apsft_dagster.resources.generation import GenerationResource
from apsft_dagster.resources.scoring import ScoringResource
from apsft_dagster.resources.training import TrainingResource


def default_resources() -> dict:
    """Resources bound to the config the definitions were built from (`profile.definitions_config`)."""
    from apsft_dagster.profile import definitions_config

    experiment = ExperimentResource.from_env(definitions_config().digest)
    return {"experiment": experiment, "generator": GenerationResource(experiment=experiment),
            "scorer": ScoringResource(experiment=experiment), "trainer": TrainingResource(experiment=experiment)}


__all__ = ["ExperimentResource", "GenerationResource", "ScoringResource", "TrainingResource", "default_resources"]
