"""Runs MLX's Python test suite (a directory of unittest modules) and
streams one JSON line per event, flushed as it happens, so that a crash of
the interpreter still names the test that was running:

    {"event": "start", "id": ...}                       a test begins
    {"event": "result", "id", "outcome", "detail"}      it ended
    {"event": "retry", "id", "outcome", "detail"}       a failed test, run once more alone
    {"event": "repeat", "id", "runs", "failures", "unjudged", "hung", "detail"}

outcome is passed, failed, error, skipped, xfail or xpass; detail is the
reason or the last line of the traceback.

    python run_mlx_suite.py <tests dir>
    python run_mlx_suite.py <tests dir> --repeat N [--hang-after S] <test id>...

The second form runs each test N times, alone, and counts its failures:
how the caller tells a test that is flaky on one build from one that is
flaky on both. A run that does not end within S seconds (HANG_SECONDS
unless given) counts as a failure and ends the process: its event says
`hung` and how many runs there were, and the tests after it are not run.
"""

import json
import os
import sys
import threading
import traceback
import unittest


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Stream(unittest.TestResult):
    """Keeps each test's outcome and, with `announce`, prints the events."""

    def __init__(self, announce):
        super().__init__()
        self.announce = announce
        self.outcomes = {}

    def _put(self, test, outcome, detail=""):
        # A failed subtest decides the test's outcome; a later pass does not undo it.
        if self.outcomes.get(test.id(), ("passed",))[0] in ("failed", "error"):
            return
        self.outcomes[test.id()] = (outcome, detail)

    def startTest(self, test):
        super().startTest(test)
        if self.announce:
            emit(event="start", id=test.id())

    def stopTest(self, test):
        super().stopTest(test)
        if self.announce:
            outcome, detail = self.outcomes.get(test.id(), ("error", "reported no outcome"))
            emit(event="result", id=test.id(), outcome=outcome, detail=detail)

    def addSuccess(self, test):
        self._put(test, "passed")

    def addFailure(self, test, err):
        self._put(test, "failed", last_line(err))

    def addError(self, test, err):
        self._put(test, "error", last_line(err))

    def addSkip(self, test, reason):
        self._put(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        self._put(test, "xfail", last_line(err))

    def addUnexpectedSuccess(self, test):
        self._put(test, "xpass")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = "failed" if issubclass(err[0], test.failureException) else "error"
            self._put(test, kind, last_line(err))


def last_line(err):
    lines = "".join(traceback.format_exception(*err)).strip().splitlines()
    return lines[-1] if lines else ""


def run(suite, announce):
    result = Stream(announce)
    suite.run(result)
    # Tests that errored before running (import errors, a failing
    # setUpClass) arrive as errors of a placeholder that never started.
    for test, err in result.errors:
        if test.id() not in result.outcomes:
            detail = err.strip().splitlines()[-1]
            result.outcomes[test.id()] = ("error", detail)
            if announce:
                emit(event="result", id=test.id(), outcome="error", detail=detail)
    return result.outcomes


DID_NOT_RUN = "did not run"
CANNOT_LOAD = "cannot load it alone: "


def run_alone(test_id):
    try:
        return run(unittest.defaultTestLoader.loadTestsFromName(test_id), False).get(test_id, ("error", DID_NOT_RUN))
    except Exception as e:  # the test cannot even be loaded alone
        return ("error", f"{CANNOT_LOAD}{e}")


def cannot_run(why):
    return why == DID_NOT_RUN or why.startswith(CANNOT_LOAD)


# How long one run of one test may take in --repeat unless --hang-after
# says otherwise (a run takes milliseconds).
HANG_SECONDS = 60


def hung(test_id, run_number, failures, unjudged, detail, hang_after):
    emit(event="repeat", id=test_id, runs=run_number, failures=failures + 1,
         unjudged=unjudged, hung=True,
         detail=detail or f"run {run_number} did not end in {hang_after} s")
    sys.stdout.flush()
    os._exit(0)


def main():
    tests_dir = os.path.abspath(sys.argv[1])
    os.chdir(tests_dir)
    sys.path.insert(0, tests_dir)
    if len(sys.argv) > 3 and sys.argv[2] == "--repeat":
        # Each test alone, exactly `times` times: how often it failed, and
        # how often it gave no result to count (skipped, or not loadable).
        times = int(sys.argv[3])
        ids = sys.argv[4:]
        hang_after = HANG_SECONDS
        if ids[:1] == ["--hang-after"]:
            hang_after, ids = float(ids[1]), ids[2:]
        for test_id in ids:
            failures, unjudged, detail = 0, 0, ""
            for run_number in range(1, times + 1):
                # A run that does not end is a failure, and ends the
                # repeats: a thread of this process is stuck for good.
                watchdog = threading.Timer(
                    hang_after,
                    hung,
                    (test_id, run_number, failures, unjudged, detail, hang_after),
                )
                watchdog.start()
                outcome, why = run_alone(test_id)
                watchdog.cancel()
                # A test that raises fails as much as one whose assertion
                # does (upstream's flaky test_async_eval_error_in_synchronize
                # does either); one that cannot run gives nothing to count.
                if outcome == "failed" or (outcome == "error" and not cannot_run(why)):
                    failures += 1
                    detail = detail or why
                elif outcome != "passed":
                    unjudged += 1
                    detail = detail or f"{outcome}: {why}"
            emit(event="repeat", id=test_id, runs=times, failures=failures,
                 unjudged=unjudged, hung=False, detail=detail)
        return
    outcomes = run(unittest.defaultTestLoader.discover(tests_dir), True)
    for test_id, (outcome, _) in sorted(outcomes.items()):
        if outcome in ("failed", "error"):
            again, detail = run_alone(test_id)
            emit(event="retry", id=test_id, outcome=again, detail=detail)


if __name__ == "__main__":
    main()
