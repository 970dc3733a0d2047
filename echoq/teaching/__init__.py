"""The teaching kit: everything the course needs on top of the :mod:`echoq` library.

* :mod:`~echoq.teaching.course` -- the lessons' setup cell, scripts shown as the server
  runs them, predict-then-run questions;
* :mod:`~echoq.teaching.exercises` -- one exercise per real move: a stub, a check that
  runs the learner's code under the lesson's failures, a catalogue of named misconceptions,
  hints, a solution on request;
* :mod:`~echoq.teaching.processes` -- child processes a check kills (SIGKILL) or freezes
  (SIGSTOP) at a chosen step;
* :mod:`~echoq.teaching.bank` -- a stand-in payment service with idempotency keys (lesson 03);
* :mod:`~echoq.teaching.predictions` -- the lessons' predict-then-run questions;
* :mod:`~echoq.teaching.lab` -- the widget panels on a live queue;
* :mod:`~echoq.teaching.contrasts` -- the cautionary wrong ways, kept apart on purpose;
* :mod:`~echoq.teaching.faults` -- crash hooks for the Worker (simulated or real kills);
* :mod:`~echoq.teaching.chaos` -- real worker processes, real SIGKILLs, an audit;
* :mod:`~echoq.teaching.persistence` -- what survives when Valkey itself dies;
* :mod:`~echoq.teaching.cluster` -- a real Valkey Cluster on this machine (lesson 07);
* :mod:`~echoq.teaching.evidence` -- what a check saw when it rejected an answer, for its picture;
* :mod:`~echoq.teaching.fast_forward` -- skip the wait for a lease to run out, no clock touched;
* :mod:`~echoq.teaching.proxies` -- a client whose every call something else sees (the judges);
* :mod:`~echoq.teaching.learner` -- who the learner is, and the one place their queues are named;
* :mod:`~echoq.teaching.presence` -- a learner's kernel says it is alive (a key with a deadline);
* :mod:`~echoq.teaching.progress` -- lessons reached and checks, recorded on the server;
* :mod:`~echoq.teaching.workshop` -- one shared Valkey for a class, each learner fenced off.

Its own Lua scripts (``echoq/teaching/lua/``: the naive pop, fast-forward, the bank) are
registered with the library's registry here, as ``teaching/<name>``; and here it chooses
the library's throwaway server (one per process) as its default. Its commands are
``python -m echoq.teaching chaos|worker|workshop``.

It depends on the library and never the other way round: ``import echoq`` loads none of
this, and the library's wheel does not carry it (the kit runs from a checkout: ``make
setup`` installs it editable). Its extra dependencies (ipywidgets, matplotlib, ipympl,
traitlets, tqdm) come with ``pip install -e '.[teaching]'``.
"""

from pathlib import Path

from .. import scripts, server

scripts.register("teaching", Path(__file__).resolve().parent / "lua")
# A lesson starts from an empty server of its own, stopped with its kernel: with no
# VALKEY_URL (a class's) nor ECHOQ_VALKEY, the kit uses a throwaway server per process, not
# the user server that keeps a user's jobs.
server.choose_default("throwaway")
