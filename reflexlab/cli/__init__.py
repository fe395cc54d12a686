"""L5, the `reflexlab` command line: wires every package together; the only layer that may import every other."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from reflexlab.errors import UserFacingError

# Command -> the module under reflexlab.cli that defines it, as a function of the module's name.
# Only the named command's module is imported, so `reflexlab serve` (an onnxruntime + rclpy node on
# a robot computer) and `reflexlab inspect` never load torch or MuJoCo; a bare `reflexlab`, `--help`
# or a misspelt command imports every verb to list them.
VERBS: dict[str, str] = {
    "demo": "demo",
    "train": "train",
    "play": "play",
    "export": "export",
    "demos": "demos",
    "bc": "bc",
    "distill": "distill",
    "inspect": "inspect",
    "serve": "serve",
    "sim-bridge": "sim_bridge",
    "record": "record",
    "export-mcap": "export_mcap",
    "bench": "bench",
    "dataset": "dataset",
    "rl": "rl",
}

# What a user can fix from the command line ends with one line and exit code 2, not a traceback: the
# project's own errors, and the built-in ones its loaders raise with a message naming file and field.
USER_ERRORS: tuple[type[Exception], ...] = (
    UserFacingError,
    ValueError,
    FloatingPointError,
    TimeoutError,
    FileNotFoundError,
    FileExistsError,
    IndexError,
)


def verb(name: str) -> Callable[..., None]:
    """The function behind command ``name`` (importing its module, and only that)."""
    module = VERBS[name]
    return getattr(importlib.import_module(f"reflexlab.cli.{module}"), module)


def main(argv: Sequence[str] | None = None) -> None:
    """Run one `reflexlab` command; ``argv`` excludes the program name (default: ``sys.argv[1:]``)."""
    import tyro

    # Headless rendering: EGL (Mesa's software EGL works without a GPU); must precede importing mujoco.
    os.environ.setdefault("MUJOCO_GL", "egl")
    args = list(sys.argv[1:] if argv is None else argv)
    names = [args[0]] if args and args[0] in VERBS else list(VERBS)
    commands = {name: verb(name) for name in names}
    try:
        tyro.extras.subcommand_cli_from_dict(commands, args=args, prog="reflexlab")
    except USER_ERRORS as e:
        print(f"reflexlab: error: {e}", file=sys.stderr)
        sys.exit(2)
