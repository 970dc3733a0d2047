"""The Fleet lab: workers on a beat, kills and restarts, a producer; lost and duplicate
effects counted from one snapshot; the naive pop-and-process fleet as the contrast."""

from .model import LOST_FIELD, PATHS, FleetModel, FleetWorker, NaiveWorker, Tally, tally

__all__ = ["LOST_FIELD", "PATHS", "FleetLab", "FleetModel", "FleetWorker", "NaiveWorker", "Tally", "tally"]


def __getattr__(name: str) -> object:
    # The view imports ipywidgets; the model must stay importable without it.
    if name == "FleetLab":
        from .view import FleetLab

        return FleetLab
    raise AttributeError(name)
