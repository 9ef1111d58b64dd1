"""A pytest plugin for running a peer's suite with named exclusions.

* `MLX_FORK_EXCLUDED`: a file of exclusions, one per line, `<node id>  #
  <reason>`. A node id names a test, a class or a module, and matches that
  node exactly: an excluded `tests/test_x.py::T::test_load` does not drop
  `test_load_config` (pytest's own `--deselect` matches by prefix). An
  exclusion that matches nothing collected is an error, so the list cannot
  go stale unseen.
* `MLX_FORK_RESULTS`: where to stream one JSON line per event: `loaded`
  first (the libmlx mapped, and the file `MLX_FORK_CLIENT`, the package under
  test, was imported from), `start` when
  a test begins, `result` with its outcome (`passed`, `failed`, `skipped`)
  and the first line of why when it ends, so a crash names the test that was
  running.
"""

import json
import os

import pytest


def _excluded():
    path = os.environ.get("MLX_FORK_EXCLUDED")
    if not path:
        return {}
    found = {}
    with open(path) as f:
        for line in f:
            node, _, reason = line.partition("#")
            node = node.strip()
            if node:
                found[node] = reason.strip()
    return found


# Excluded modules are not even imported (one may need a package that is
# not installed): they are matched here, as paths under the root.
_ignored = set()


def pytest_ignore_collect(collection_path, config):
    try:
        rel = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    if rel in _excluded():
        _ignored.add(rel)
        return True
    return None


def pytest_collection_modifyitems(session, config, items):
    excluded = _excluded()
    if not excluded:
        return
    used = set(_ignored)
    kept, dropped = [], []
    for item in items:
        chain = {node.nodeid for node in item.listchain()}
        hit = chain & excluded.keys()
        used |= hit
        (dropped if hit else kept).append(item)
    stale = sorted(excluded.keys() - used)
    if stale:
        raise pytest.UsageError(
            "excluded node ids that match nothing collected: " + ", ".join(stale)
        )
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    stream = config.pluginmanager.get_plugin("mlx-fork-results")
    if stream is not None:
        stream.emit(event="deselected", count=len(dropped), modules=len(_ignored))


class _Stream:
    def __init__(self, path):
        self.out = open(path, "a", buffering=1)
        self.outcome = {}

    def emit(self, **event):
        self.out.write(json.dumps(event) + "\n")

    @pytest.hookimpl
    def pytest_sessionstart(self, session):
        # What this run tests: the libmlx the loader mapped, and where the
        # package under test (`MLX_FORK_CLIENT`, a module name) was
        # imported from: the installed package, not a copy in a source tree.
        import importlib

        import mlx.core  # noqa: F401
        from loaded_libmlx import loaded_libmlx

        client = importlib.import_module(os.environ["MLX_FORK_CLIENT"])
        self.emit(
            event="loaded",
            libmlx=loaded_libmlx(),
            client=os.path.realpath(client.__file__),
        )

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid, location):
        self.emit(event="start", id=nodeid)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        # Subtest reports carry their parent's node id: any failure fails it.
        now = self.outcome.get(report.nodeid, ("passed", ""))
        why = ""
        if report.longrepr is not None:
            text = str(getattr(report, "longreprtext", "") or report.longrepr)
            lines = [l for l in text.splitlines() if l.strip()]
            errors = [l for l in lines if l.startswith("E ")]
            why = (errors or lines or [""])[-1 if not errors else 0].strip()[:300]
        if report.failed:
            now = ("failed", now[1] or why)
        elif report.skipped and now[0] == "passed":
            now = ("skipped", why)
        self.outcome[report.nodeid] = now
        if report.when == "teardown":
            outcome, why = self.outcome.pop(report.nodeid)
            self.emit(event="result", id=report.nodeid, outcome=outcome, detail=why)


def pytest_configure(config):
    path = os.environ.get("MLX_FORK_RESULTS")
    if path:
        config.pluginmanager.register(_Stream(path), "mlx-fork-results")
