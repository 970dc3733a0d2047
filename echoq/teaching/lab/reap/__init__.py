"""The Reap lab: leases on the server's clock, the stalled check, the dead set, the race."""

from .model import ReapModel

__all__ = ["ReapLab", "ReapModel"]


def __getattr__(name: str) -> object:
    # The view imports ipywidgets; the model must stay importable without it.
    if name == "ReapLab":
        from .view import ReapLab

        return ReapLab
    raise AttributeError(name)
