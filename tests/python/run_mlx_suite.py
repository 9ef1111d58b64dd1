"""Runs MLX's Python test suite (a directory of unittest modules) and
prints one JSON line per test: {"id", "outcome", "detail"}, where outcome is
passed, failed, error, skipped, xfail or xpass, and detail the reason or the
last line of the traceback. A test that fails is run once more, alone; if it
passes then, its outcome is "flaky" (it is reported, not excluded).

    python run_mlx_suite.py <tests dir>
"""

import json
import os
import sys
import traceback
import unittest


class Collect(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = {}

    def _put(self, test, outcome, detail=""):
        self.outcomes[test.id()] = (outcome, detail)

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


def run(suite):
    result = Collect()
    suite.run(result)
    # Tests that errored before running (import errors) arrive as errors of
    # a placeholder test; module-level setUpClass failures likewise.
    for test, err in result.errors:
        result.outcomes.setdefault(test.id(), ("error", err.strip().splitlines()[-1]))
    return result.outcomes


def main():
    tests_dir = os.path.abspath(sys.argv[1])
    os.chdir(tests_dir)
    sys.path.insert(0, tests_dir)
    suite = unittest.defaultTestLoader.discover(tests_dir)
    outcomes = run(suite)
    for test_id, (outcome, detail) in sorted(outcomes.items()):
        if outcome in ("failed", "error"):
            try:
                again = run(unittest.defaultTestLoader.loadTestsFromName(test_id))
            except Exception:  # the test cannot even be loaded alone
                again = {}
            if again.get(test_id, ("",))[0] == "passed":
                outcome, detail = "flaky", f"failed once ({detail}), passed when run again"
        print(json.dumps({"id": test_id, "outcome": outcome, "detail": detail}), flush=True)


if __name__ == "__main__":
    main()
