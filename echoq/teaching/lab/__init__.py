"""The lab: panels that drive a live Valkey, for the notebooks to display in one line.

>>> from echoq.teaching.lab import ClaimLab
>>> ClaimLab()          # enqueue, claim, complete or crash, reap -- on a real queue

One small package per panel, each with its model (traitlets, no widgets), its figure
(matplotlib, built once, updated in place), its view (ipywidgets) and its words:

* :mod:`~echoq.teaching.lab.claim` -- the recoverable claim;
* :mod:`~echoq.teaching.lab.delivery` -- at-least-once delivery, effects, the fence;
* :mod:`~echoq.teaching.lab.reap` -- leases on the server's clock, the stalled check, the race;
* :mod:`~echoq.teaching.lab.fleet` -- workers on a beat, kills, the truth about loss;
* :mod:`~echoq.teaching.lab.race` -- every interleaving of two reapers, run on the server;
* :mod:`~echoq.teaching.lab.judged` -- not a panel: the picture in an exercise's feedback of the
  run it rejected (drawn when the feedback is shown).

Shared: :mod:`.model` (the model base, frames from one snapshot), :mod:`.frames` (frames,
the paths a move lit), :mod:`.figure` (places, markers, tweening), :mod:`.player`
(animation, time control), :mod:`.view` (the panel base, static fallback), :mod:`.words`
(what every panel says), :mod:`.style` (palette, marker shapes, sizes). The models load no
widget library.
"""

import importlib.util

_missing = [m for m in ("ipywidgets", "matplotlib", "traitlets") if importlib.util.find_spec(m) is None]
if _missing:
    raise ImportError(
        f"the lab panels need {', '.join(_missing)}, which the library alone does not install: "
        "in the checkout, make setup (or pip install -e '.[teaching]')"
    )

from ..fast_forward import fast_forward  # noqa: E402

__all__ = [
    "ClaimLab",
    "ClaimModel",
    "DeliveryLab",
    "DeliveryModel",
    "FleetLab",
    "FleetModel",
    "LabModel",
    "LabPanel",
    "RaceLab",
    "RaceModel",
    "ReapLab",
    "ReapModel",
    "fast_forward",
]

_WHERE = {
    "ClaimLab": ("claim.view", "ClaimLab"),
    "ClaimModel": ("claim.model", "ClaimModel"),
    "DeliveryLab": ("delivery.view", "DeliveryLab"),
    "DeliveryModel": ("delivery.model", "DeliveryModel"),
    "ReapLab": ("reap.view", "ReapLab"),
    "ReapModel": ("reap.model", "ReapModel"),
    "FleetLab": ("fleet.view", "FleetLab"),
    "FleetModel": ("fleet.model", "FleetModel"),
    "RaceLab": ("race.view", "RaceLab"),
    "RaceModel": ("race.model", "RaceModel"),
    "LabModel": ("model", "LabModel"),
    "LabPanel": ("view", "LabPanel"),
}


def __getattr__(name: str) -> object:
    # Loaded on first use, so that importing a model never imports a widget library.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _WHERE[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value
