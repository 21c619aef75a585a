"""`apsft run`'s design-anchor check and review points: the flags, the checks made before anything is
written (core/freeze.py `require_amendment`, core/review.py `plan` and `resumable`), the resume recorded once
every check passed, and the pause recorded after the run."""

from __future__ import annotations

import argparse
import getpass
import os

from apsft_dagster.core.config import POINTS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pause-after", action="append", choices=POINTS, metavar="POINT",
                   help="stop after this review point (seal | selection; repeatable; the profile's "
                        "review.pause_after adds to it) until `apsft run --resume`")
    p.add_argument("--resume", action="store_true",
                   help="go past the open review pause, recording who resumed and when (UTC)")
    p.add_argument("--by", metavar="NAME", help="who resumes (default: $USER or the login name); with --resume")


def before_run(args: argparse.Namespace, config, location: str, stages: list) -> tuple[list, str | None]:
    """(the stages to run, the review point to pause at after them); ApsftError, nothing written, when the
    design changed since the anchor without an amendment or the run would pass an unresumed pause."""
    from apsft_dagster.core import review
    from apsft_dagster.core.errors import ReviewError
    from apsft_dagster.core.freeze import require_amendment
    from apsft_dagster.core.object_store import open_store
    from apsft_dagster.experiment.stages import REVIEW_POINTS, STAGES

    if args.by is not None and not args.resume:
        raise ReviewError("--by NAME names who resumes; use it with --resume")
    store = open_store(location)
    changes, amended = require_amendment(store, config)
    if changes:
        print(f"  design anchor: {len(changes)} change(s) since it, after amendment(s) "
              f"{', '.join(str(r['seq']) for r in amended)}", flush=True)
    asked = [*(args.pause_after or []), *(config.review.pause_after if config.review else [])]
    events = review.read_reviews(store)
    jobs, pause = review.plan(events, [s.job for s in STAGES], [s.job for s in stages], REVIEW_POINTS, asked,
                              args.resume)
    if args.resume:
        review.resumable(events, config.profile, _who(args))
    return [s for s in stages if s.job in jobs], pause


def record_resume(args: argparse.Namespace, config, location: str) -> None:
    """`--resume`: record who resumed and when (UTC), once every check of the run has passed."""
    from apsft_dagster.core import review
    from apsft_dagster.core.object_store import open_store

    if args.resume:
        event = review.resume(open_store(location), config.profile, _who(args))
        print(f"  resumed after {review.NAMES[event['point']]} by {event['by']} at {event['at']}", flush=True)


def after_run(config, location: str, pause: str | None, outcomes: list) -> None:
    """Record the pause (only when every stage, the paused one included, succeeded) and say how to resume."""
    from apsft_dagster.core import review
    from apsft_dagster.core.layout import REVIEW_LOG
    from apsft_dagster.core.object_store import open_store
    from apsft_dagster.experiment.stages import REVIEW_POINTS, STAGES

    if pause is None or not outcomes or not all(o.ok for o in outcomes) or outcomes[-1].job != REVIEW_POINTS[pause]:
        return
    store = open_store(location)
    event = review.record(store, "pause", pause, config.profile)
    jobs = [s.job for s in STAGES]
    following = jobs[jobs.index(REVIEW_POINTS[pause]) + 1]
    print(f"apsft run: paused for review after {review.NAMES[pause]} ({event['at']}; {store.path(REVIEW_LOG)}). "
          f"Review, then `apsft run --resume [--by NAME] --from {following}` with the same --profile/--config/"
          f"--store; until then a run past {REVIEW_POINTS[pause]} refuses", flush=True)


def _who(args: argparse.Namespace) -> str:
    """--by, else $USER, else the login name ("" when there is none: the resume then asks for --by)."""
    if args.by is not None:
        return args.by
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):
        return ""
