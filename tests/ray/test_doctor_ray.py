"""``doctor --ray`` where nothing answers: bounded by ``--timeout``, ended by SIGTERM, exit 2 with a message.

Ray's own client retries a connection it cannot make for minutes and does not end on SIGTERM
meanwhile; the doctor runs it in a child of its own session and ends that whole. (A running
cluster that answers too slowly: tests/ray/test_verl_route.py.)
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT, clean_env

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def doctor(address: str, timeout: str, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "npu_shim", "doctor", "--json", "--ray", address, "--timeout", timeout],
        env=clean_env([ROOT], **ENV),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line holds ``text`` (the doctor's Ray client names its address)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:  # gone meanwhile
            continue
    return found


@pytest.fixture
def address() -> Iterator[str]:
    """A loopback address that refuses connections: a port held, never listened on (nobody else can take it)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


def test_no_cluster_at_the_address_is_an_error_within_the_timeout(tmp_path, address):
    process = doctor(address, "10", tmp_path)
    try:
        stdout, stderr = process.communicate(timeout=120)  # a bound for the test, far above the doctor's own
    finally:
        process.kill()
    report = json.loads(stdout)
    assert (process.returncode, report["status"]) == (2, "error"), stderr
    timed_out = f"no answer from a Ray worker of the cluster at {address} within 10 s (connecting included)"
    refused = f"could not connect to a Ray cluster at {address}: "  # if Ray gives up first
    assert report["error"] == timed_out or report["error"].startswith(refused), report["error"]
    assert processes_naming(address) == [], "the Ray client outlived the doctor"


def test_sigterm_ends_the_doctor_and_its_ray_client(tmp_path, address):
    process = doctor(address, "600", tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not [pid for pid in processes_naming(address) if pid != process.pid] and time.monotonic() < deadline:
            time.sleep(0.2)  # until the Ray client runs
        assert [pid for pid in processes_naming(address) if pid != process.pid], "no Ray client was started"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    report = json.loads(stdout)
    assert (process.returncode, report["error"]) == (
        2,
        f"interrupted by SIGTERM while waiting for a Ray worker of the cluster at {address}",
    ), stderr
    assert processes_naming(address) == [], "the Ray client outlived the doctor"
