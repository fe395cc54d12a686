"""What several verbs share: the error a user fixes on the command line, and the check that raises it most."""

from __future__ import annotations

from pathlib import Path

from reflexlab.errors import UserFacingError


class UserError(RuntimeError, UserFacingError):
    """An error the user can fix; printed without a traceback."""


def require(path: Path, what: str) -> None:
    """Refuse a missing input up front, naming what was expected there, before anything slow starts."""
    if not path.exists():
        raise UserError(f"{path} does not exist: expected {what}")
