"""The picture of a rejected answer: what the check saw, drawn when its feedback is shown.

* :mod:`.model` -- the picture as data (:class:`~.model.Picture`), from the feedback's
  evidence, and which of the learner's commands the board is at; no widgets, no matplotlib;
* :mod:`.figure` -- the figure, built once and updated in place from a picture;
* :mod:`.still` -- the still picture: a PNG with the ✗ line as alt text;
* :mod:`.notebook` -- the feedback as a notebook gets it: its lines, the still picture and,
  in a kernel, the live view;
* :mod:`.view` -- where a widget manager runs, the live view: buttons and a slider that step
  the learner's board through its move's commands;
* :mod:`.words` -- what the picture says.
"""

from .model import JudgedModel, Picture, picture

__all__ = ["JudgedModel", "Picture", "picture"]
