"""`freeze_loaded` (core/engines/memory.py): what is alive stays out of every later collection,
what was already garbage is freed first, and APSFT_GC_FREEZE=off leaves the collector as Python
has it. In a fresh interpreter each, since the suite's own workers freeze at collection."""

import json
import os
import subprocess
import sys

CHILD = """
import gc, json, weakref
from apsft_dagster.core.engines.memory import freeze_loaded
class Node: pass
kept, dropped = Node(), Node()
kept.me, dropped.me = kept, dropped  # two cycles: one still referenced, one garbage
gone = weakref.ref(dropped)
del dropped
before = gc.get_freeze_count()
freeze_loaded()
print(json.dumps({"before": before, "frozen": gc.get_freeze_count(), "garbage_freed": gone() is None,
                  "kept_tracked_by_collections": any(o is kept for o in gc.get_objects())}))
"""


def _child(**env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "APSFT_GC_FREEZE"} | env
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=environ, check=True)
    return json.loads(out.stdout)


def test_what_is_alive_is_frozen_and_what_was_garbage_is_freed_first():
    seen = _child()
    assert seen["before"] == 0 and seen["frozen"] > 1000  # the interpreter's modules and our two objects
    assert seen["garbage_freed"]  # collected before the freeze, not kept forever
    assert not seen["kept_tracked_by_collections"]  # gc.get_objects() lists no frozen object


def test_off_leaves_the_collector_as_python_has_it():
    seen = _child(APSFT_GC_FREEZE="off")
    assert seen["frozen"] == 0 and seen["kept_tracked_by_collections"]
    assert not seen["garbage_freed"]  # nothing collected either: the call did nothing
