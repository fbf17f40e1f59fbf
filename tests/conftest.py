"""The suite's scheduling under pytest-xdist (`make test`, --dist loadfile): each file's tests on one worker,
so that a module's shared recordings are made once, but for the files named in SPLIT, whose tests share
nothing and are spread over the workers one by one (test_benchmarks.py's quickest run of each script took
~215 s of a 297 s first phase, all on one worker, 2026-12-06). xdist's own `loadgroup` cannot say this
under pytest 9.2: it renames a test's `_nodeid`, which pytest 9 no longer reads (docs/performance.md,
stop 65, saw every module spread). Files in JOINED run on the worker of the file they name (a shared analysis).
"""
SPLIT = {"test_benchmarks.py"}
# files scheduled together: they read one analysis of the golden pair (tests/unit/golden_pair.py), made once
JOINED = {"tests/unit/test_first_screen.py": "tests/unit/test_golden_figures.py"}


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class FilesButSplit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path.rsplit("/", 1)[-1] in SPLIT else JOINED.get(path, path)

    return FilesButSplit(config, log)
