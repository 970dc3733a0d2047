"""What JupyterHub knows about the class's people: whose server runs, who logged in.

The dashboard runs as the hub service ``echoq-dashboard`` (see the snippet ``workshop up``
writes); the hub gives a service ``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_API_TOKEN``, and
the snippet grants it the scopes to list users and read their servers. With them the board
shows, per learner, whether their Jupyter server runs, and names the hub users who are not
on the roster (they work alone, unseen). Without them (``make dashboard`` outside a hub)
there is nothing to ask, and the board says nothing about servers rather than guess.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from dataclasses import dataclass

from ..learner import normalize_hub_user

__all__ = ["HubUser", "HubView", "SCOPES"]

# What the dashboard service may read of the hub (granted by the workshop's hub snippet).
SCOPES = ["list:users", "read:users:name", "read:users:activity", "read:servers"]


@dataclass(frozen=True)
class HubUser:
    name: str
    server: str  # "running", "starting", "stopping" or "stopped"
    last_activity: str | None  # the hub's ISO time, as it gives it

    @property
    def logged_in(self) -> bool:
        """Whether they ever logged in: the hub makes every allowed user at its start, with
        no activity and no server until their first login."""
        return self.server != "stopped" or self.last_activity is not None


class HubView:
    """The hub's users, read at most every ``every_s`` seconds (one HTTP request)."""

    def __init__(self, api_url: str | None = None, token: str | None = None, *, every_s: float = 5.0) -> None:
        self.api_url = (api_url or os.environ.get("JUPYTERHUB_API_URL") or "").rstrip("/")
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN") or ""
        # Where the hub's pages are, as its browsers see them: a learner's server is at
        # <base>user/<name>/ (the hub gives its services JUPYTERHUB_BASE_URL).
        self.base_url = os.environ.get("JUPYTERHUB_BASE_URL") or "/"
        self.every_s = every_s
        self.error: str | None = None
        self._users: dict[str, HubUser] | None = None
        self._at = float("-inf")

    @property
    def available(self) -> bool:
        return bool(self.api_url and self.token)

    def users(self) -> dict[str, HubUser] | None:
        """Hub user name -> what the hub says; None when there is no hub to ask."""
        if not self.available:
            return None
        if time.monotonic() - self._at >= self.every_s:
            self._at = time.monotonic()
            try:
                self._users = self._fetch()
                self.error = None
            except Exception as exc:  # the hub restarting: keep the last answer, say why
                self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return self._users

    def _fetch(self) -> dict[str, HubUser]:
        request = urllib.request.Request(
            f"{self.api_url}/users?limit=1000", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=2.0) as reply:  # noqa: S310 (the hub's own API URL)
            data = json.loads(reply.read())
        if isinstance(data, dict):  # paginated form
            data = data.get("items", [])
        found = {}
        for user in data:
            server = (user.get("servers") or {}).get("", {})
            if server.get("ready"):
                state = "running"
            elif server.get("pending") == "spawn":
                state = "starting"
            elif server.get("pending") == "stop":
                state = "stopping"
            else:
                state = "stopped"
            name = normalize_hub_user(str(user.get("name", "")))
            found[name] = HubUser(name, state, server.get("last_activity") or user.get("last_activity"))
        return found
