"""The script registry: the one place that finds, expands and runs Lua.

Every ``.lua`` file is loaded here and nowhere else; no module sends script text to the
server by itself. One module per job:

* :mod:`.registry` -- where the scripts are (the library's ``lua/``, and folders other
  packages register), includes and constants expanded into the text the server runs, its
  SHA1, each script's named KEYS read off its header;
* :mod:`.runner` -- :func:`run` (EVALSHA, then the source once on NOSCRIPT), :func:`preload`;
* :mod:`.pipelined` -- :class:`Pipelined`, calls of one script sent ahead of their replies;
* :mod:`.replicated` -- :func:`run_replicated`, a script and the durability wait on one
  connection, with its own MOVED/ASK handling on a cluster;
* :mod:`.translation` -- what the server or the network says, as the library's typed
  one-line errors (:func:`translate`, :func:`guard`, :func:`denied`, ...);
* :mod:`.learner` -- :func:`run_text`, Lua that is none of the registry's (a learner's answer).
"""

from .learner import run_text
from .pipelined import Pipelined
from .registry import KEY_ORDER, expanded, lua_dir, lua_value, named_keys, names, raw_source, register, sha
from .replicated import run_replicated
from .runner import preload, run
from .translation import (
    busy,
    cluster_refusal,
    cross_slot,
    denied,
    doing,
    first_line,
    guard,
    is_acl_refusal,
    lost_server,
    operation,
    translate,
    typed,
)

__all__ = [
    "KEY_ORDER",
    "lua_dir",
    "register",
    "names",
    "raw_source",
    "expanded",
    "sha",
    "named_keys",
    "lua_value",
    "run",
    "run_replicated",
    "run_text",
    "Pipelined",
    "preload",
    "guard",
    "doing",
    "operation",
    "translate",
    "typed",
    "busy",
    "first_line",
    "is_acl_refusal",
    "denied",
    "lost_server",
    "cluster_refusal",
    "cross_slot",
]
