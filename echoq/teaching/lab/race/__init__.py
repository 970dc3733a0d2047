"""The race explorer: every interleaving of two reapers' commands, run on the server."""

from .model import COMMANDS, Exploration, RaceModel, Run, Step, explore, interleavings

__all__ = ["COMMANDS", "Exploration", "RaceLab", "RaceModel", "Run", "Step", "explore", "interleavings"]


def __getattr__(name: str) -> object:
    # The view imports ipywidgets; the model must stay importable without it.
    if name == "RaceLab":
        from .view import RaceLab

        return RaceLab
    raise AttributeError(name)
