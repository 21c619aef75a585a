"""apsft: the experiment, the loss-mask curation and the RL run report on one Dagster platform."""

from apsft_dagster.core.determinism import pin_cpu_kernels, pin_hub_kernels
from apsft_dagster.core.kernel_notice import quiet_kernel_fallbacks

pin_cpu_kernels()  # before anything imports torch: its kernels read these settings once (core/determinism.py)
pin_hub_kernels()  # ... and before transformers: nothing fetches kernels from the hub at run time
quiet_kernel_fallbacks()  # one line of ours for transformers' four reference-kernel warnings
