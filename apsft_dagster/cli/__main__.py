"""`python -m apsft_dagster.cli ...` is `apsft ...`."""

import sys

from apsft_dagster.cli import main

sys.exit(main())
