"""The client's one background thread (cluster/repeat.py): it repeats its step until stopped
or until the step says it is done, and `stop()` returns only once no step runs any more."""
from __future__ import annotations

import threading

from cluster.repeat import Repeating


def test_it_repeats_until_the_step_is_done():
    calls, done = [], threading.Event()

    def step():
        calls.append(len(calls))
        if len(calls) == 3:
            done.set()
            return None              # done: no fourth call
        return 0.0
    r = Repeating(step, 0.0, "test-repeat")
    r.start()
    assert done.wait(30)
    r.stop()
    assert calls == [0, 1, 2]


def test_stop_joins_a_running_step_and_no_step_follows():
    entered, calls = threading.Event(), []

    def step():
        calls.append("step")
        entered.set()
        r._stop.wait(30)             # a slow step (a render of a large store), still running
        return 0.0                   # when stop() is called
    r = Repeating(step, 0.0, "test-repeat")
    r.start()
    assert entered.wait(30)
    assert r.stop() is True          # it was running, and is joined: the caller's last step is due
    assert calls == ["step"] and not r._thread.is_alive()


def test_stop_before_start_and_twice_is_harmless():
    r = Repeating(lambda: 0.0, 0.0, "test-repeat")
    assert r.stop() is False and r.stop() is False
