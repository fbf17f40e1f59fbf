"""The suite's scheduling under pytest-xdist (`make test`, --dist loadfile): each file's tests on one worker,
so that a module's shared recordings are made once, but for the files named in SPLIT, whose tests share
nothing and are spread over the workers one by one (test_benchmarks.py's quickest run of each script took
~215 s of a 297 s first phase, all on one worker, 2026-12-06). xdist's own `loadgroup` cannot say this
under pytest 9.2: it renames a test's `_nodeid`, which pytest 9 no longer reads (docs/performance.md,
stop 65, saw every module spread).

The longest go first (HEAVY_FIRST; the rest in their files' order), and a worker is given its next file or
test when it holds one not yet run, not three: xdist orders files by their count of tests, which sent the
single benchmark tests (~30 s each) last, and a worker that prefetched three of them ran them while others
stood idle."""
SPLIT = {"test_benchmarks.py"}
# the first phase's longest files and split tests, longest first (fresh-clone CI, 2026-12-06: 104 s down to 12 s)
HEAVY_FIRST = [
    "integration/test_faults.py", "integration/test_ebpf.py", "integration/test_server_end.py",
    "integration/test_replicas.py", "integration/test_record.py", "integration/test_families.py",
    "unit/test_fuzz_loader.py", "unit/test_golden_prediction.py", "integration/test_shim.py",
    "integration/test_user_first.py", "unit/test_native_sanitized.py",
    "test_benchmarks.py::test_peers_measures_the_attached_case",
    "test_benchmarks.py::test_each_benchmark_runs_in_its_quickest_mode[predict_matrix.py]",
    "integration/test_offload_contract.py", "integration/test_answer.py", "integration/test_compare.py",
    "unit/test_types.py", "test_benchmarks.py::test_each_benchmark_runs_in_its_quickest_mode[overload.py]",
    "test_benchmarks.py::test_compare_rule",
]


def _scope(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return nodeid if path.rsplit("/", 1)[-1] in SPLIT else path


def _rank(nodeid: str) -> int:
    scope = _scope(nodeid)
    return next((i for i, h in enumerate(HEAVY_FIRST) if scope.endswith(h)), len(HEAVY_FIRST))


def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "dist", "no") != "no":
        items.sort(key=lambda item: _rank(item.nodeid))  # stable: a file's tests keep their order


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # the collection's order (above), not the count of tests

    class FilesButSplit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _reschedule(self, node) -> None:
            # a worker runs a test once it knows the next (its teardown depends on it): one queued is enough
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return FilesButSplit(config, log)
