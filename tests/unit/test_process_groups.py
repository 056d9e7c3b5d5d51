"""``probe.finish``, the one wait for the tests' processes (tests/matrix/probe.py; ``helpers.run_ranks`` through it): a
process that fails ends the other ranks of its group at once, never a process of no group or of another group; the
deadline still ends what overran. Plain sleeping interpreters, about 2 s in all."""

from __future__ import annotations

import subprocess
import sys
import time

from helpers import clean_env, matrix_probe

probe = matrix_probe()
FAILS = "import sys; sys.exit(1)"
HANGS = "import time; time.sleep(120)"
ENDS_WELL = "import time; time.sleep(1)"


def started(code: str, group: object = None, rank: int = 0) -> subprocess.Popen[str]:
    child = probe.launch([sys.executable, "-c", code], clean_env())
    if group is not None:  # as probe.start_group marks its ranks (its store needs torch, which this layer lacks)
        child.rendezvous, child.rank = group, rank
    return child


def test_a_failed_rank_ends_the_other_ranks_of_its_group_at_once():
    group = object()
    begun = time.monotonic()
    finished = probe.finish({"rank 0": started(FAILS, group, 0), "rank 1": started(HANGS, group, 1)})
    assert time.monotonic() - begun < 10
    assert finished["rank 0"] == (1, "")
    status, stderr = finished["rank 1"]
    assert status != 0
    assert stderr.endswith("\n[ended by the test: rank 0 of its group failed]"), stderr


def test_a_failed_process_ends_no_process_of_no_group_or_of_another_group():
    first, second = object(), object()
    finished = probe.finish(
        {
            "alone, fails": started(FAILS),
            "alone": started(ENDS_WELL),
            "first group, fails": started(FAILS, first, 0),
            "second group": started(ENDS_WELL, second, 0),
        }
    )
    assert finished == {
        "alone, fails": (1, ""),
        "alone": (0, ""),
        "first group, fails": (1, ""),
        "second group": (0, ""),
    }


def test_what_runs_past_the_deadline_is_ended_and_said_so():
    group = object()
    finished = probe.finish({0: started(HANGS, group, 0), 1: started(HANGS, group, 1), 2: started(HANGS)}, timeout=1)
    for status, stderr in finished.values():
        assert status != 0
        assert stderr.endswith("\n[ended by the test: still running after 1 s]"), stderr
