"""The valkeytrace command line: one module per command, one error type mapped to a status."""
from __future__ import annotations

import sys

import click

from valkeytrace.errors import EXIT_RUNTIME, EXIT_USAGE, VTError


# each command in a module of its own (cli/NAME.py, its function NAME), imported when it runs: `report` does not
# load the recorder, nor a bad option's error anything (~0.15 s of each command's start, 2026-12-06); what
# `valkeytrace --help` lists, in the order a newcomer uses them (no command is imported to list them)
SUMMARIES = {  # one line each at 80 columns; no command's name as a word of its own (a wrapped line would list it)
    "record": "run the valkey#4029 workloads on a server, tracing its threads",
    "compare": "two builds or settings in alternating launches, then the verdict",
    "report": "the verdict, the tables and the why, from one or two recordings",
    "predict": "another configuration's tables, from the model of one recording",
    "export": "latencies as HdrHistogram files or a CSV/Parquet table; a timeline",
    "merge": "join the recordings of a primary and its replicas into one",
    "doctor": "check what this machine needs for recording",
}
COMMANDS = tuple(SUMMARIES)  # one list: a command without its summary cannot be registered


class _Group(click.Group):
    """Maps VTError, usage errors (and stray exceptions) to one line on stderr and an exit status:
    2 for usage, 1 for runtime failures, 130 when interrupted (docs/errors.md). Commands load lazily."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)  # as click lists registered commands: --help unchanged

    def format_commands(self, ctx, formatter):
        """Each command once, with its one-line summary (SUMMARIES)."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in SUMMARIES])

    def get_command(self, ctx, cmd_name):
        if cmd_name not in COMMANDS:
            return None
        import importlib

        return getattr(importlib.import_module(f"valkeytrace.cli.{cmd_name}"), cmd_name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except BrokenPipeError:  # `valkeytrace report ... | head`: the reader left; end quietly
            _quiet_stdout()
            sys.exit(0)
        except click.UsageError as exc:  # bad option or argument: one line, not click's three
            click.echo(f"valkeytrace: error: {exc.format_message()} (see --help)", err=True)
            sys.exit(EXIT_USAGE)
        except click.Abort:
            click.echo("valkeytrace: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            click.echo(f"valkeytrace: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except VTError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"valkeytrace: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, BrokenPipeError):
            raise
        except KeyboardInterrupt:
            click.echo("valkeytrace: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug: say so in one line, keep the traceback for --debug
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"valkeytrace: internal error: {type(exc).__name__}: {exc} "
                       "(run with --debug for the traceback)", err=True)
            sys.exit(EXIT_RUNTIME)


def _quiet_stdout():
    """stdout's reader is gone: point it at /dev/null so that the interpreter's final flush is silent."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="valkeytrace", prog_name="valkeytrace")  # read when asked
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx, debug):
    """Explain why a Valkey server's latency changes between two builds or configurations.

    Start with `make demo` (a compare of fsync-always and the durable offload, about 5 minutes) and
    `valkeytrace COMMAND --help`.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


__all__ = ["main", "EXIT_USAGE"]
