"""L0: the base class of the errors a user can fix; imports nothing, so any layer may raise one."""

from __future__ import annotations


class UserFacingError(Exception):
    """An error whose message tells the user what to do; the CLI prints it without a traceback.

    Subclasses keep their historical bases too (``ValueError``, ``KeyError``, ``RuntimeError``), so
    callers that catch those still do; the CLI needs only this one, and so imports none of the
    (torch-, MuJoCo-heavy) modules that define them.
    """
