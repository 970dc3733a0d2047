"""The lab: panels that drive a live Valkey, for the notebooks to display in one line.

>>> from echoq.teaching.lab import ClaimLab
>>> ClaimLab()          # enqueue, claim, finish or crash, reap -- on a real queue

* :mod:`echoq.teaching.lab.model` -- the state of each panel (traitlets, no widgets), its moves;
* :mod:`echoq.teaching.lab.figures` -- matplotlib figures built once and updated in place;
* :mod:`echoq.teaching.lab.views` -- the ``VBox`` panels binding widgets to a model.
"""

import importlib.util

_missing = [m for m in ("ipywidgets", "matplotlib", "traitlets") if importlib.util.find_spec(m) is None]
if _missing:
    raise ImportError(
        f"the lab panels need {', '.join(_missing)}, which the library alone does not install: "
        "pip install 'echoq[teaching]'"
    )

from ..fast_forward import fast_forward  # noqa: E402
from .model import ClaimModel, DeliveryModel, FleetModel, LabModel, ReapModel  # noqa: E402
from .views import ClaimLab, DeliveryLab, FleetLab, LabPanel, ReapLab  # noqa: E402

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
