"""Two assets in the GPU pool and one CPU asset, for tests/test_pools.py (importable by the
multiprocess executor's children)."""

import time

import dagster as dg

from apsft_dagster.assets.common import GPU_POOL

SECONDS = 1.0


@dg.asset(pool=GPU_POOL)
def gpu_first() -> None:
    time.sleep(SECONDS)


@dg.asset(pool=GPU_POOL)
def gpu_second() -> None:
    time.sleep(SECONDS)


@dg.asset
def cpu_beside() -> None:
    time.sleep(SECONDS)


defs = dg.Definitions(assets=[gpu_first, gpu_second, cpu_beside],
                      jobs=[dg.define_asset_job("pool_job", executor_def=dg.multiprocess_executor.configured(
                          {"max_concurrent": 3}))])  # all three could run at once; only the pool says no


def pool_job():
    return defs.resolve_job_def("pool_job")
