"""The script registry: the one place that finds, expands and runs Lua.

Every ``.lua`` file is loaded here and nowhere else; no module sends script text to the
server by itself. One module per job:

* :mod:`.registry` -- where the scripts are (the library's ``lua/``, and folders other
  packages register), includes and constants expanded into the text the server runs, its
  SHA1, each script's named KEYS read off its header;
* :mod:`.runner` -- :func:`run` (EVALSHA, then the source once on NOSCRIPT), :func:`run_behind`
  (a script written behind a blocking wait), :func:`preload`;
* :mod:`.pipelined` -- :class:`Pipelined`, calls of one script sent ahead of their replies;
* :mod:`.replicated` -- :func:`run_replicated`, a script and the durability wait on one
  connection, with its own MOVED/ASK handling on a cluster;
* :mod:`.learner` -- :func:`run_text`, Lua that is none of the registry's (a learner's answer).
"""

from . import learner, pipelined, registry, replicated, runner
from .learner import *  # noqa: F403
from .pipelined import *  # noqa: F403
from .registry import *  # noqa: F403
from .replicated import *  # noqa: F403
from .runner import *  # noqa: F403

# Each module's public names are the package's (``from echoq import scripts; scripts.run(...)``).
__all__ = [
    *registry.__all__,
    *runner.__all__,
    *pipelined.__all__,
    *replicated.__all__,
    *learner.__all__,
]
