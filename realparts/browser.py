"""Headless Chromium and its chromedriver, for the tests that drive ``kto console`` in a browser.

In: the machine (Debian's ``chromium`` and ``chromium-driver`` packages).
Out: :func:`find` — the two executables, or a PartError saying how to get them;
:func:`ensure` — the same after installing the packages with apt-get when they
are missing and this runs as root on Debian, printing what it does.
``python -m realparts.browser`` (run by ``make test``) calls :func:`ensure`; when
it cannot, it exits 2 under ``CI=true`` and otherwise says that the browser
tests will be skipped.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time

from realparts import caching

PACKAGES = ("chromium", "chromium-driver")
"""Debian's packages of the browser and of its WebDriver server."""

HINT = "as root on Debian: apt-get install -y chromium chromium-driver"


@dataclasses.dataclass(frozen=True)
class Browser:
    chromium: str
    """The browser's executable."""
    chromedriver: str
    """Its WebDriver server, of the same version."""


def find() -> Browser:
    """Chromium and chromedriver on PATH; PartError naming what is missing and how to get it."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", chromedriver)) if path is None]
    if chromium is None or chromedriver is None:
        raise caching.PartError(f"{' and '.join(missing)} not installed (needed by the console's browser tests): "
                                f"{HINT}")
    return Browser(chromium, chromedriver)


def _apt(*args: str) -> None:
    command = ["apt-get", *args]
    print(f"realparts: browser: {' '.join(command)}", flush=True)
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
                              timeout=900, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except subprocess.TimeoutExpired:
        raise caching.PartError(f"{' '.join(command)} did not finish within 15 minutes") from None
    if done.returncode != 0:
        tail = " | ".join(line for line in (done.stdout + done.stderr).strip().splitlines()[-6:] if line.strip())
        raise caching.PartError(f"{' '.join(command)} failed (exit {done.returncode}): {tail}")


def ensure() -> Browser:
    """:func:`find`, after ``apt-get install`` of the packages when they are missing and apt-get can be run."""
    try:
        return find()
    except caching.PartError as missing:
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            raise caching.PartError(f"{missing} (apt-get cannot be run here as root)") from None
    _apt("update", "-qq")
    _apt("install", "-y", "-qq", *PACKAGES)
    return find()


def main() -> int:
    started = time.monotonic()
    try:
        found = ensure()
    except caching.PartError as exc:
        if os.environ.get("CI", "").lower() == "true":
            print(f"realparts: error: browser: {exc}", file=sys.stderr)
            return 2
        print(f"realparts: browser: {exc}; the console's browser tests will be skipped", file=sys.stderr)
        return 0
    print(f"realparts: browser ready: {found.chromium}, {found.chromedriver} ({time.monotonic() - started:.1f}s)",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
