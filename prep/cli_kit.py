"""The click pieces `prep.cli`'s commands share: the conversion options as click options, the
group that turns every `PrepError` (and an unreadable file) into a one-line `Error: ...`, and the
checks of OUTPUT folders and picture or page file names. No TensorFlow, no Beam.
"""

from __future__ import annotations

import os
import sys

import click

from prep.core import storage
from prep.core.convert_options import OPTIONS
from prep.core.errors import PrepError
from prep.core.manifest import FILENAME


def click_options(command):
    """Decorates a click command with the conversion options (`prep.core.convert_options.OPTIONS`)."""
    for o in reversed(OPTIONS):
        if o.flag:
            command = click.option(o.name, is_flag=True, help=o.help)(command)
        elif o.multiple:
            command = click.option(o.name, type=o.type, multiple=True, help=o.help, metavar=o.metavar)(command)
        else:
            kind = click.Choice(list(o.choices)) if o.choices else o.type
            command = click.option(
                o.name, type=kind, default=o.default, help=o.help, metavar=o.metavar, show_default=o.default is not None
            )(command)
    return command


def cannot_access(exc: OSError) -> str:
    """The one line an `OSError` becomes."""
    where = f" {exc.filename}" if exc.filename else ""
    return f"cannot access{where}: {exc.strerror or exc}"


class ErrorGroup(click.Group):
    """`prep`'s group: a `PrepError` or `OSError` of any command exits 1 with one `Error:` line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PrepError as exc:
            raise click.ClickException(str(exc)) from None
        except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing more to say
            sys.stderr.close()
            ctx.exit(0)
        except OSError as exc:
            raise click.ClickException(cannot_access(exc)) from None


class Trouble(click.ClickException):
    """An error of a command whose exit status 1 means something else (`leakage`, like diff): exit 2."""

    exit_code = 2


def existing_folder(output: str, what: str = "OUTPUT") -> None:
    """OUTPUT of verify and inspect must be a local folder; anything else is a usage error (exit 2)."""
    if not os.path.exists(output):
        raise click.UsageError(f"{what} {output} does not exist")
    if not os.path.isdir(output):
        raise click.UsageError(f"{what} {output} is not a folder")


def existing_dataset(output: str, what: str = "OUTPUT") -> None:
    """A local OUTPUT must be a folder (`existing_folder`); a remote one must hold a manifest.json.
    A store that cannot be asked (no credentials, no network) is not a dataset that is missing."""
    if not storage.is_remote(output):
        existing_folder(output, what)
        return
    try:
        found = storage.exists(storage.join(output, FILENAME))
    except Exception as exc:  # each store raises its own types
        raise click.UsageError(f"cannot access {what} {output}: {exc}") from None
    if not found:
        raise click.UsageError(f"{what} {output} does not exist")


def png_name(ctx, param, value):
    """Option callback: a .png file name, or None."""
    if value is not None and not value.lower().endswith(".png"):
        raise click.BadParameter(f"{value!r} must be a .png file name")
    return value


def html_name(ctx, param, value):
    """Option callback: an .html (or .htm) file name, or None."""
    if value is not None and not value.lower().endswith((".html", ".htm")):
        raise click.BadParameter(f"{value!r} must be an .html file name")
    return value
