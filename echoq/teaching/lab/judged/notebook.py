"""A rejected answer's feedback as a notebook gets it: :func:`bundle` is the output of a
:class:`~echoq.teaching.exercises.Feedback` with a picture -- text/plain (the lines),
text/html (the lines and the picture as an image with its alt text, which is the ✗ line's
own words), image/png, and, in a kernel with ipywidgets, the live view
(:class:`.view.JudgedView`) whose buttons step the learner's board through its commands. A
frontend without a widget manager (a stored notebook, the course site, GitHub) shows the
HTML; JupyterLab, Notebook 7 and Voila show the view. Everything is drawn here, when the
feedback is displayed: a check that is only judged (a test, a tool) draws nothing.
"""

from __future__ import annotations

import base64
from typing import Any

from .still import Still

__all__ = ["bundle"]


def feedback_html(feedback: Any, still: Still) -> str:
    """The feedback's lines with the picture under them, before the hint."""
    page = feedback._repr_html_()
    head, hint, tail = page.rpartition("<p><b>Hint:</b>")
    figure = f'<figure style="margin:4px 0">{still.img()}</figure>'
    if hint:
        return f"{head}{figure}{hint}{tail}"
    return page.removesuffix("</div>") + figure + "</div>"


def bundle(feedback: Any) -> dict[str, Any]:
    """The output of ``feedback`` (see the module's docstring)."""
    still = Still(feedback)
    data: dict[str, Any] = {
        "text/plain": str(feedback),
        "text/html": feedback_html(feedback, still),
        "image/png": base64.b64encode(still.png).decode(),
    }
    if _kernel():
        from .view import JudgedView

        view = JudgedView(feedback, still)
        shown = view._repr_mimebundle_() or {}
        data.update({k: v for k, v in shown.items() if k != "text/plain"})
    return data


def _kernel() -> bool:
    """True in a Jupyter kernel that can show a widget (ipywidgets installed)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return False
    if shell is None or not hasattr(shell, "kernel"):
        return False
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None
