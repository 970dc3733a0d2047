"""What the tests share besides fixtures: server start-ups (``servers``, ``cluster``), the
clock and one-place helpers (``helpers``), the browser harness (``browser``) and the lab
tour (``lab_tour``). The fixtures themselves are in ``tests/conftest.py``.

The library's tests import ``servers``, ``cluster`` and ``helpers`` only, none of which
imports the teaching kit at import time (``tests/test_tiers.py`` checks it).
"""
