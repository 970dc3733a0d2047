"""The picture of a rejected answer: what the check saw, drawn when its feedback is shown.

* :mod:`.model` -- the picture as data (:class:`~.model.Picture`), from the feedback's
  evidence, and which of the learner's commands the board is at; no widgets, no matplotlib;
* :mod:`.figure` -- the figure, built once and updated in place from a picture;
* :mod:`.view` -- the feedback as shown: its lines, the still picture (PNG, alt text) and,
  where a widget manager runs, buttons to step through the learner's commands;
* :mod:`.words` -- what the picture says.
"""

from .model import JudgedModel, Picture, picture

__all__ = ["JudgedModel", "Picture", "picture"]
