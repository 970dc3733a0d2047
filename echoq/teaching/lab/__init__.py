"""The lab: panels that drive a live Valkey, for the notebooks to display in one line.

>>> from echoq.lab import ClaimLab
>>> ClaimLab()          # enqueue, claim, finish or crash, reap -- on a real queue

* :mod:`echoq.lab.model` -- the state of each panel (traitlets, no widgets), its moves;
* :mod:`echoq.lab.figures` -- matplotlib figures built once and updated in place;
* :mod:`echoq.lab.views` -- the ``VBox`` panels binding widgets to a model.
"""

from .model import ClaimModel, DeliveryModel, FleetModel, LabModel, ReapModel, fast_forward
from .views import ClaimLab, DeliveryLab, FleetLab, LabPanel, ReapLab

__all__ = [
    "ClaimLab",
    "ClaimModel",
    "DeliveryLab",
    "DeliveryModel",
    "FleetLab",
    "FleetModel",
    "LabModel",
    "LabPanel",
    "ReapLab",
    "ReapModel",
    "fast_forward",
]
