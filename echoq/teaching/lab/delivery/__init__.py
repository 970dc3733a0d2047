"""The Delivery lab: at-least-once delivery, effects once per JOB id, and the fence."""

from .model import CONSUMERS, CRASH_LEASE_MS, DeliveryModel, DeliveryRun

__all__ = ["CONSUMERS", "CRASH_LEASE_MS", "DeliveryLab", "DeliveryModel", "DeliveryRun"]


def __getattr__(name: str) -> object:
    # The view imports ipywidgets; the model must stay importable without it.
    if name == "DeliveryLab":
        from .view import DeliveryLab

        return DeliveryLab
    raise AttributeError(name)
