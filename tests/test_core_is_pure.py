import subprocess
import sys

PROBE = """
import importlib, pkgutil, sys
import apsft_dagster.core as core
assert not [m for m in sys.modules if m.split('.')[0] == 'dagster'], 'import apsft_dagster.core pulled dagster'
for info in pkgutil.walk_packages(core.__path__, 'apsft_dagster.core.'):
    importlib.import_module(info.name)
leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'dagster_webserver'))
print(len([m for m in sys.modules if m.startswith('apsft_dagster.core.')]), leaked)
"""


def test_core_and_every_core_module_import_without_dagster():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    modules, leaked = proc.stdout.strip().split(" ", 1)
    assert int(modules) >= 15  # every core module was imported
    assert leaked == "[]"
