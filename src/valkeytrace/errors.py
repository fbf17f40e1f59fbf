"""The one error type every command raises; the CLI maps it to a one-line message and a status."""

EXIT_RUNTIME = 1
EXIT_USAGE = 2


class VTError(Exception):
    """A failure the user can act on. The message is one sentence naming the problem and fix."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message, exit_code=None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class VTUsageError(VTError):
    exit_code = EXIT_USAGE


class RecordingError(VTError):
    """A recording file that cannot be read: missing, corrupt, or of an unsupported version."""
