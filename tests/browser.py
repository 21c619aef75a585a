"""The UI as a person sees it: `apsft ui` on a free loopback port, driven by headless Chromium.

The browser and its driver are the distribution's (`/usr/bin/chromium`, `/usr/bin/chromedriver`);
Selenium is given both paths, so Selenium Manager never looks for, or downloads, a browser.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from apsft_dagster.core.paths import PROJECT_ROOT
from conftest import free_port

INSTALL = "apt-get install chromium chromium-driver"
# Headless in a closed network: without these Chromium stalls on first-run, sync and update fetches.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
WAIT_S = 90  # the first page waits for the code location to load (definitions import torch)


@contextlib.contextmanager
def chromium(width: int = 1600, height: int = 1200):
    """A Selenium driver over the distribution's Chromium, with a fresh profile; fails (never skips)
    naming the packages to install when the browser or its driver is missing."""
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver_path:
        pytest.fail(f"the browser test needs the distribution's Chromium and its driver: {INSTALL} "
                    f"(found chromium={browser}, chromedriver={driver_path})")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the browser test needs selenium: pip install -e '.[test]'")
    with tempfile.TemporaryDirectory(prefix="apsft-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def alive(port: int) -> list[int]:
    """Every process in the group of the `dagster dev` serving `port` (webserver, daemon, code servers)."""
    table = [line.split(None, 2)
             for line in subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                                        text=True).stdout.splitlines()]
    groups = {int(pgid) for pid, pgid, args in table if "dagster dev" in args and f"-p {port}" in args}
    return [int(pid) for pid, pgid, _ in table if int(pgid) in groups]


@contextlib.contextmanager
def served_ui(state: Path, host_args: tuple[str, ...] = (), store: str | None = None, profile: str | None = None):
    """`apsft ui` over the state folder `state` on a free port; yields (port, the `apsft ui` process)
    once the webserver answers, and ends every process it started (webserver, daemon, code servers)
    afterwards, whatever the caller did with it. `store` and `profile`: another store and profile
    than the state folder's default smoke store (benchmarks/bench_ui_partitions.py)."""
    port = free_port()
    env = {**os.environ, "APSFT_STATE_DIR": str(state)}
    for name in ("DAGSTER_HOME", "APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR"):
        env.pop(name, None)
    if store is not None:
        env["APSFT_STORE_DIR"] = str(store)
    host_args = (*host_args, *(("--profile", profile) if profile else ()))
    proc = subprocess.Popen([sys.executable, "-m", "apsft_dagster.cli", "ui", "--port", str(port), *host_args],
                            cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"`apsft ui` did not answer on 127.0.0.1:{port} (exit status {proc.poll()})")
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        for pid in alive(port):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on `port` (IPv4 dotted, IPv6 as the kernel's hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))) if len(address) == 8 else address)
    return found


class Page:
    """The UI at 127.0.0.1:`port` as the browser shows it; every read waits (explicitly) for what it expects."""

    def __init__(self, driver, port: int, screenshots: Path):
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.url, self.screenshots = driver, f"http://127.0.0.1:{port}", screenshots
        self.wait = WebDriverWait(driver, WAIT_S)
        # Dagster's one-time "join the community" dialog would cover the pages: mark it seen, on the
        # UI's own origin, before the first page renders.
        driver.get(f"{self.url}/server_info")
        driver.execute_script("window.localStorage.setItem('communityNux', '\"1\"')")

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def read(self, xpath: str, attribute: str | None = None) -> list[str]:
        """The text (or `attribute`) of every element at `xpath`, in document order."""
        from selenium.webdriver.common.by import By

        elements = self.driver.find_elements(By.XPATH, xpath)
        return [e.get_attribute(attribute) if attribute else e.text for e in elements]

    def shown(self, xpath: str, expected: list[str], attribute: str | None = None, order=list) -> list[str]:
        """Wait until the elements at `xpath` show `expected` (after `order`); return what they show,
        for the caller's assert to print when the wait ran out."""
        from selenium.common.exceptions import TimeoutException

        with contextlib.suppress(TimeoutException):
            self.wait.until(lambda _: order(self.read(xpath, attribute)) == expected)
        return order(self.read(xpath, attribute))

    def lines(self, expected: set[str]) -> set[str]:
        """Wait until the page's visible lines include `expected`; return them."""
        from selenium.common.exceptions import TimeoutException

        def visible() -> set[str]:
            return set("\n".join(self.read("//body")).splitlines())

        with contextlib.suppress(TimeoutException):
            self.wait.until(lambda _: expected <= visible())
        return visible()

    def element(self, xpath: str, clickable: bool = False):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as ec

        found = ec.element_to_be_clickable if clickable else ec.presence_of_element_located
        return self.wait.until(found((By.XPATH, xpath)))

    def screenshot(self, name: str, element=None) -> None:
        if element is not None:
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        self.driver.save_screenshot(str(self.screenshots / f"{name}.png"))
