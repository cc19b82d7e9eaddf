"""The `swarm-node` application object and its entry point.

Every command module registers its commands on `app`. `main` runs it and turns every
mistake a user can make into one line on stderr with exit code 2: a `SwarmError` raised by
a command, and every usage error of the command line itself (an unknown command or option,
a missing argument, a value of the wrong type), each naming the help to read. Bare
`swarm-node` (or `swarm-node cluster`) prints the help and exits 0, as `--help` does.
Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import sys
from typing import Annotated

import typer

import swarm
from swarm.core.errors import SwarmError

PROG = "swarm-node"

app = typer.Typer(
    name=PROG,
    help="A node of a decentralized RL swarm: trains its own policy with GRPO on verifiable "
    "tasks, shares signed rollouts with peers and keeps a ledger of every contribution. "
    f"Run '{PROG} COMMAND --help' for a command's options.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text as written: no markdown or rich markup to mangle it
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} {swarm.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_show_version,
            help="Print the version of swarm-node and exit.",
        ),
    ] = False,
) -> None:
    pass  # the options above act through their callbacks; the help is the app's


def usage_line(error: typer.TyperException) -> str:
    """One line for a command-line usage error: what is wrong, then where the help is."""
    ctx = getattr(error, "ctx", None)
    message = " ".join(error.format_message().split()).rstrip(".")
    possibilities = getattr(error, "possibilities", None)
    option = getattr(error, "option_name", None)
    if possibilities and option:  # an unknown option: name the closest one
        close = difflib.get_close_matches(option, list(possibilities), n=1, cutoff=0.7)
        message = f"no such option {option}" + (f" (did you mean {close[0]}?)" if close else "")
    elif ctx is not None and message.startswith("No such command"):
        group = ctx.command
        names = group.list_commands(ctx) if hasattr(group, "list_commands") else []
        message += f" (commands: {', '.join(names)})"
    message = message[:1].lower() + message[1:]
    path = ctx.command_path if ctx is not None else PROG
    return f"{message}; see '{path} --help'"


def _is_help_request(error: BaseException) -> bool:
    # A group called without a command (`swarm-node cluster`): click asks for its help.
    return type(error).__name__ == "NoArgsIsHelpError"


def one_line(message: str) -> str:
    """A message on one line (library messages sometimes span several)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app; mistakes become one line on stderr and exit code 2."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = app(args=args or ["--help"], prog_name=PROG, standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(n) is returned, not raised, in this mode
            sys.exit(code)
    except SwarmError as e:
        typer.echo(f"error: {one_line(str(e))}", err=True)
        sys.exit(2)
    except typer.TyperException as e:  # the command line's own usage errors
        if _is_help_request(e):
            typer.echo(e.format_message())
            sys.exit(0)
        typer.echo(f"error: {usage_line(e)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except (typer.Abort, typer.Exit) as e:
        sys.exit(getattr(e, "exit_code", 1))
