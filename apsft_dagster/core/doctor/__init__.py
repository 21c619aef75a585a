"""`apsft doctor`: is this machine able to run the GPU environment, and is the profile's snapshot whole,
before the first GPU-minute is paid for.

Standard library only, and Python 3.9 or newer: `scripts/setup_gpu.sh` runs the host checks with the
system python3 before any venv exists, as a file (`python3 apsft_dagster/core/doctor/host.py --setup`),
so that nothing of the package (its `__init__` pins kernels) is imported. That is why this package's
`__init__` stays empty and each module imports its siblings either as package modules or, run as a
file, by their bare names. Only `profile_checks` (a profile's needs; `apsft doctor --profile P`) reads
the typed config, and so runs in the project's venv.

  check           one requirement's verdict (`Check`), the report's lines and its exit status
  facts           what the project asks of the host, read from the lock and its settings
  gpu             the NVIDIA driver and GPU (nvidia-smi), nvcc
  disk            free space against what the environment, the snapshot and the merged models take
  host            every host check, and the command line setup calls
  snapshot        a local snapshot's files, shard sizes, recorded revision and, asked, hashes
  profile_checks  all of it for one profile
"""
