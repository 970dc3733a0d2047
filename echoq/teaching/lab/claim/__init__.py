"""The Claim lab: one worker, one job at a time; a crash leaves the job leased, a reap brings it back."""

from .model import CLAIM_STEPS, ClaimModel

__all__ = ["CLAIM_STEPS", "ClaimLab", "ClaimModel"]


def __getattr__(name: str) -> object:
    # The view imports ipywidgets; the model must stay importable without it.
    if name == "ClaimLab":
        from .view import ClaimLab

        return ClaimLab
    raise AttributeError(name)
