"""Runs MLX's Python test suite (a directory of unittest modules) and
streams one JSON line per event, flushed as it happens, so that a crash of
the interpreter still names the test that was running:

    {"event": "start", "id": ...}                       a test begins
    {"event": "result", "id", "outcome", "detail"}      it ended
    {"event": "retry", "id", "outcome", "detail"}       a failed test, run once more alone
    {"event": "repeat", "id", "runs", "failures", "unjudged", "hung", "detail"}
    {"event": "once", "id", "outcome", "detail"}        the --once form

outcome is passed, failed, error, skipped, xfail or xpass; detail is the
reason or the last line of the traceback.

    python run_mlx_suite.py <tests dir>
    python run_mlx_suite.py <tests dir> --only <test id>...
    python run_mlx_suite.py <tests dir> --except <test id>...
    python run_mlx_suite.py <tests dir> --repeat N [--hang-after S] <test id>...
    python run_mlx_suite.py <tests dir> --once <test id>

The second form runs only the named tests, as the first runs all: the
control runs the tests the fix did not pass, which is all a comparison
needs. The third form runs every test but the named, as the first runs
all: a test whose outcome depends on timing runs apart from a suite that
shares the machine; a name that matches no test is its own error. The
fourth form runs each test N times alone, each run in a process of its
own (the fifth form), two at a time, and counts its failures: how the
caller tells a test that is flaky on one build from one that is flaky on
both. Runs in one process would not be independent trials: a process keeps
what earlier runs left behind (MLX's scheduler, its caches), and one run
that hangs would end the rest. A run that does not end within S seconds
(HANG_SECONDS unless given) is killed and counts as a failure, `hung`; one
whose process dies without a result counts as a failure too.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
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
# says otherwise (a run takes well under a second).
HANG_SECONDS = 60

# Runs of --repeat at once: each is a process of its own.
REPEAT_JOBS = 2


def run_once_in_child(tests_dir, test_id, hang_after):
    """One run of `test_id` in a fresh interpreter: (outcome, detail)."""
    try:
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), tests_dir, "--once", test_id],
            capture_output=True, text=True, timeout=hang_after,
        )
    except subprocess.TimeoutExpired:
        return ("hung", f"did not end in {hang_after} s")
    tail = (child.stderr.strip().splitlines() or [""])[-1]
    for line in child.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "once":
                # A process that dies after its result (a crash at exit)
                # failed that run, whatever the result said.
                if child.returncode != 0:
                    return ("crashed", f"exit status {child.returncode} after "
                            f"{event['outcome']}: {tail}")
                return (event["outcome"], event["detail"])
    return ("crashed", f"exit status {child.returncode} without a result: {tail}")


def repeat(tests_dir, test_id, times, hang_after):
    with concurrent.futures.ThreadPoolExecutor(REPEAT_JOBS) as pool:
        runs = list(pool.map(lambda _: run_once_in_child(tests_dir, test_id, hang_after), range(times)))
    failures, unjudged, hung, detail = 0, 0, 0, ""
    for outcome, why in runs:
        # A test that raises fails as much as one whose assertion does
        # (upstream's flaky test_async_eval_error_in_synchronize does
        # either); one that cannot run gives nothing to count.
        if outcome in ("failed", "hung", "crashed") or (outcome == "error" and not cannot_run(why)):
            failures += 1
            hung += outcome == "hung"
            detail = detail or why
        elif outcome != "passed":
            unjudged += 1
            detail = detail or f"{outcome}: {why}"
    emit(event="repeat", id=test_id, runs=times, failures=failures,
         unjudged=unjudged, hung=hung, detail=detail)


def flatten(suite):
    """The tests of a suite, however nested."""
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from flatten(t)
        else:
            yield t


def main():
    tests_dir = os.path.abspath(sys.argv[1])
    os.chdir(tests_dir)
    sys.path.insert(0, tests_dir)
    if len(sys.argv) == 4 and sys.argv[2] == "--once":
        outcome, why = run_alone(sys.argv[3])
        emit(event="once", id=sys.argv[3], outcome=outcome, detail=why)
        return
    if len(sys.argv) > 3 and sys.argv[2] == "--repeat":
        times = int(sys.argv[3])
        ids = sys.argv[4:]
        hang_after = HANG_SECONDS
        if ids[:1] == ["--hang-after"]:
            hang_after, ids = float(ids[1]), ids[2:]
        for test_id in ids:
            repeat(tests_dir, test_id, times, hang_after)
        return
    if len(sys.argv) > 2 and sys.argv[2] == "--only":
        suite, outcomes = unittest.TestSuite(), {}
        for test_id in sys.argv[3:]:
            try:
                loaded = unittest.defaultTestLoader.loadTestsFromName(test_id)
                why = "" if test_id in {t.id() for t in flatten(loaded)} else "no such test"
            except Exception as e:
                why = str(e)
            if why:  # a name that does not load is its own result
                outcomes[test_id] = ("error", f"{CANNOT_LOAD}{why}")
                emit(event="result", id=test_id, outcome="error", detail=outcomes[test_id][1])
            else:
                suite.addTests(loaded)
        outcomes.update(run(suite, True))
    elif len(sys.argv) > 2 and sys.argv[2] == "--except":
        apart = set(sys.argv[3:])
        every = list(flatten(unittest.defaultTestLoader.discover(tests_dir)))
        outcomes = {}
        for test_id in sorted(apart - {t.id() for t in every}):
            outcomes[test_id] = ("error", "no such test to run apart")
            emit(event="result", id=test_id, outcome="error", detail=outcomes[test_id][1])
        # Discovery's order is kept, so a class's tests stay together and its
        # fixtures run once.
        outcomes.update(run(unittest.TestSuite(t for t in every if t.id() not in apart), True))
    else:
        outcomes = run(unittest.defaultTestLoader.discover(tests_dir), True)
    for test_id, (outcome, _) in sorted(outcomes.items()):
        if outcome in ("failed", "error"):
            again, detail = run_alone(test_id)
            emit(event="retry", id=test_id, outcome=again, detail=detail)


if __name__ == "__main__":
    main()
