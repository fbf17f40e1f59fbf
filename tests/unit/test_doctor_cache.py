"""doctor's compile-cache line where the cache directory cannot even be looked at: run as another user
with HOME kept (`setpriv --reuid`, check 19), stat() of it is refused; a warning, not an internal error."""
from valkeytrace.cli import doctor


class _Refused:
    def exists(self):
        raise PermissionError(13, "Permission denied")

    def __str__(self):
        return "/root/.cache/valkeytrace/bpf"


def test_a_cache_directory_that_cannot_be_looked_at_is_a_warning(monkeypatch):
    from valkeytrace.tracers import bpf_cache

    monkeypatch.setattr(bpf_cache, "directory", lambda: _Refused())
    got = []
    doctor._check_bpf_cache(got.append)
    assert len(got) == 1 and got[0].status == doctor.WARN and "Permission denied" in got[0].detail, got
