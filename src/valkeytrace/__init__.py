"""valkeytrace: explain why a Valkey server's latency changes between two builds or configs."""


def __getattr__(name: str) -> str:
    """__version__, read from the installed package's metadata when first asked for: importlib.metadata
    took ~35 ms of every command's start (a bad option's one-line error included), most of which never
    write a recording."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("valkeytrace")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
