"""valkeytrace: explain why a Valkey server's latency changes between two builds or configs."""
try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("valkeytrace")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
