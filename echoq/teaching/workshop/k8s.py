"""``python -m echoq.teaching workshop k8s``: the class on Kubernetes (Zero to JupyterHub).

Writes, each with mode 0600, into the output folder:

* ``echoq-valkey.yaml`` -- the class server: a ConfigMap with its ``valkey.conf`` (the
  settings ``up`` gives a server it starts: AOF ``everysec``, ``noeviction``, the class's
  limits), a Secret with its ACL file (the admin's user, and once the workshop folder has
  them, the instructor's and every learner's user with the rules of :mod:`.acl`: only
  password hashes), a StatefulSet (one pod, its append-only file on a volume claim) and a
  Service learners' pods reach it by;
* ``echoq-roster.yaml`` -- once the folder has learners: a Secret with the roster (each
  learner's ``VALKEY_URL``, naming the Service), mounted in the hub at ``/etc/echoq``;
* ``values.yaml`` -- the Helm values of the jupyterhub chart: ``hub.extraConfig`` carries
  the snippet ``up`` writes (:func:`.admin.hub_snippet`), reading that roster; ``singleuser``
  the learners' image and each learner's memory and CPU limits.

Without a workshop in the folder the admin password is generated into ``admin-password``
(mode 0600) in the output folder: the one ``workshop up --url`` attaches with, through a
port-forward, to create the users and load the scripts (docs/WORKSHOP.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ...errors import InvalidArgument
from . import acl
from .admin import (
    HUB_SNIPPET,
    MAX_LEARNERS,
    ROSTER_FILE,
    SERVER_CONFIG,
    SERVER_SETTINGS,
    STATE_FILE,
    Workshop,
    bytes_of,
    class_settings,
    command,
    hub_snippet,
    workshop_dir,
    write_private,
)

__all__ = ["NAME", "ROSTER_SECRET", "ROSTER_MOUNT", "k8s", "manifests", "values"]

NAME = "echoq-valkey"  # the StatefulSet, its Service, ConfigMap and Secret
ROSTER_SECRET = "echoq-roster"
ROSTER_MOUNT = "/etc/echoq"  # where the hub reads the roster
PORT = 6379
VALKEY_IMAGE = "valkey/valkey:9"  # database permissions in the ACL (db=0) need Valkey 9
VALKEY_UID = 999  # the valkey user of the official image
PASSWORD_FILE = "admin-password"
FILES = ("echoq-valkey.yaml", "echoq-roster.yaml", "values.yaml")

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label: a namespace's name
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([KMGT]i?)?")  # a memory quantity the chart and Kubernetes take


def service_host(namespace: str) -> str:
    """The Service's name inside the cluster: what every learner's URL names."""
    return f"{NAME}.{namespace}.svc.cluster.local"


def _acl_line(user: str, rules: list[str], commands: tuple[str, ...] = ()) -> str:
    # An ACL file line is ACL SETUSER's arguments after `user`; database 0 only (Valkey 9).
    return " ".join(["user", user, *rules, *(f"+{c}" for c in commands), "resetdbs", "db=0"])


def acl_file(admin_password: str, workshop: Workshop | None) -> str:
    """The server's ACL file: the admin (the default user), and the workshop's users."""
    digest = "#" + hashlib.sha256(admin_password.encode()).hexdigest()
    lines = [f"user default on {digest} ~* &* +@all"]
    if workshop is not None:
        lines.append(
            _acl_line(acl.INSTRUCTOR_USER, acl.instructor_rules(workshop.instructor_password), acl.INSTRUCTOR_COMMANDS)
        )
        commands = acl.learner_commands()
        for lid, learner in sorted(workshop.learners.items()):
            lines.append(_acl_line(lid, acl.learner_rules(lid, workshop.class_name, learner.password), commands))
    return "".join(f"{line}\n" for line in lines)


def server_config(settings: dict[str, str]) -> str:
    """``valkey.conf``: what ``up`` gives a server it starts, on the pod's own port and volume."""
    config = {
        "port": str(PORT),
        "bind": "* -::*",  # the pod's own address: the Service reaches it there
        "dir": "/data",
        "aclfile": "/etc/valkey/acl/users.acl",
        **SERVER_CONFIG,
        **{name: settings[name] for name in SERVER_SETTINGS},
    }
    return "".join(f"{key} {value}\n" for key, value in config.items())


def _memory_quantity(size: str) -> str:
    # Valkey's units are 1024-based: 1gb is 1Gi.
    return f"{bytes_of(size, 'maxmemory') // 1024**2}Mi"


def manifests(namespace: str, admin_password: str, settings: dict[str, str], workshop: Workshop | None,
              *, image: str = VALKEY_IMAGE, storage: str = "1Gi") -> list[dict[str, Any]]:  # fmt: skip
    """The class server's objects: ConfigMap, Secret (ACL), StatefulSet, Service."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "echoq"}
    meta = {"name": NAME, "namespace": namespace, "labels": labels}
    maxmemory = bytes_of(settings["maxmemory"], "maxmemory")
    container = {
        "name": "valkey",
        "image": image,
        "command": ["valkey-server", "/etc/valkey/conf/valkey.conf"],
        "ports": [{"name": "valkey", "containerPort": PORT}],
        # Room above maxmemory for the AOF rewrite's copy-on-write and the clients' buffers.
        "resources": {
            "requests": {"memory": _memory_quantity(settings["maxmemory"]), "cpu": "500m"},
            "limits": {"memory": f"{2 * maxmemory // 1024**2}Mi"},
        },
        "readinessProbe": {"tcpSocket": {"port": "valkey"}, "periodSeconds": 2},
        "volumeMounts": [
            {"name": "conf", "mountPath": "/etc/valkey/conf", "readOnly": True},
            {"name": "acl", "mountPath": "/etc/valkey/acl", "readOnly": True},
            {"name": "data", "mountPath": "/data"},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"valkey.conf": server_config(settings)}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {**meta, "name": f"{NAME}-acl"},
            "type": "Opaque",
            "stringData": {"users.acl": acl_file(admin_password, workshop)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta,
            "spec": {
                "serviceName": NAME,
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": {"runAsUser": VALKEY_UID, "runAsGroup": VALKEY_UID, "fsGroup": VALKEY_UID},
                        "containers": [container],
                        "volumes": [
                            {"name": "conf", "configMap": {"name": NAME}},
                            {"name": "acl", "secret": {"secretName": f"{NAME}-acl", "defaultMode": 0o440}},
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"selector": labels, "ports": [{"name": "valkey", "port": PORT, "targetPort": "valkey"}]},
        },
    ]


def _in_cluster(workshop: Workshop, namespace: str, where: Path) -> Workshop:
    # The same class, as learners' pods reach it: the Service's name and port.
    return dataclasses.replace(workshop, dir=where, host=service_host(namespace), port=PORT)


def roster_secret(workshop: Workshop, namespace: str) -> dict[str, Any]:
    """The roster (learner -> VALKEY_URL naming the Service) as a Secret the hub mounts."""
    with tempfile.TemporaryDirectory() as tmp:
        text = _in_cluster(workshop, namespace, Path(tmp)).write_roster().read_text()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ROSTER_SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "echoq"}},
        "type": "Opaque",
        "stringData": {ROSTER_FILE: text},
    }


def values(workshop: Workshop, namespace: str, *, image: str, memory: str, cpu: float) -> dict[str, Any]:
    """The jupyterhub chart's values: the class snippet in ``hub.extraConfig``, reading the
    roster Secret mounted at ``/etc/echoq``; each learner's image and limits."""
    snippet = hub_snippet(_in_cluster(workshop, namespace, Path(ROSTER_MOUNT)), None)
    # The chart puts it in the hub's config itself: no load_subconfig line to follow.
    snippet = "\n".join(line for line in snippet.splitlines() if HUB_SNIPPET not in line) + "\n"
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    return {
        "hub": {
            # Group-readable: the hub runs as an unprivileged user whose group (fsGroup) owns the files.
            "extraVolumes": [{"name": ROSTER_SECRET, "secret": {"secretName": ROSTER_SECRET, "defaultMode": 0o440}}],
            "extraVolumeMounts": [{"name": ROSTER_SECRET, "mountPath": ROSTER_MOUNT, "readOnly": True}],
            "extraConfig": {"echoq": snippet},
        },
        "singleuser": {
            "image": {"name": name, "tag": tag},
            "memory": {"limit": memory, "guarantee": memory},
            "cpu": {"limit": cpu, "guarantee": min(cpu, 0.25)},
        },
    }


def _yaml(documents: list[dict[str, Any]], header: str) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # each object spelt out, as people write them
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None  # a config file or a snippet stays readable
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    body = "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, width=1000) for d in documents)
    return "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + body


def k8s(folder: str | Path | None, out: str | Path, *, namespace: str = "jhub", image: str = "",
        memory: str = "1G", cpu: float = 1.0, valkey_image: str = VALKEY_IMAGE) -> list[str]:  # fmt: skip
    """Write the manifests and the Helm values for the workshop in ``folder``; the lines to print."""
    if not _LABEL.fullmatch(namespace):
        raise InvalidArgument(f"--namespace must be a Kubernetes namespace name (a-z, 0-9, -), got {namespace!r}")
    if not _QUANTITY.fullmatch(memory):
        raise InvalidArgument(f"--memory must be a quantity like 1G, 512M or 2Gi, got {memory!r}")
    if not 0 < cpu <= 64:
        raise InvalidArgument(f"--cpu must be a number of CPUs above 0 (e.g. 0.5, 1), got {cpu}")
    if image and not re.fullmatch(r"[^\s@]+", image):
        raise InvalidArgument(f"--image must be name:tag (no spaces, no @digest), got {image!r}")
    if not image:
        raise InvalidArgument(
            "--image is needed: the learners' image (name:tag), with echoq installed "
            "(`pip install '<checkout>[teaching]'`; docs/WORKSHOP.md)"
        )
    where = workshop_dir(folder)
    workshop = Workshop.load(where) if (where / STATE_FILE).is_file() else None
    target = Path(out).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise InvalidArgument(f"--out {target} is a file; give a folder (it is made if missing)")
    if workshop is not None:
        password = unquote(urlsplit(workshop.admin_url).password or "")
        settings = workshop.settings or class_settings(len(workshop.learners), {})
    else:
        known = target / PASSWORD_FILE
        password = known.read_text().strip() if known.is_file() else ""
        settings = class_settings(MAX_LEARNERS, {})  # room for any class: `up --url` does not change it
    if workshop is not None and not password:
        raise InvalidArgument(f"{where / STATE_FILE} has no admin password; run `{command('up')}` again")
    target.mkdir(parents=True, exist_ok=True)
    lines = []
    if not password:
        password = secrets.token_urlsafe(24)
        write_private(target / PASSWORD_FILE, password + "\n")
        lines.append(f"admin password (generated), mode 0600: {target / PASSWORD_FILE}")
    shown = workshop or Workshop(where, "class", service_host(namespace), PORT, "", "", started=False)
    server = manifests(namespace, password, settings, workshop, image=valkey_image)
    header = (
        f"The echoq class server for namespace {namespace}, written by `workshop k8s`:\n"
        f"kubectl apply -f {FILES[0]}   (passwords appear here only as hashes)"
    )
    write_private(target / FILES[0], _yaml(server, header))
    lines.append(f"class server (ConfigMap, Secret, StatefulSet, Service), mode 0600: {target / FILES[0]}")
    roster = target / FILES[1]
    if workshop is not None and workshop.learners:
        text = _yaml([roster_secret(workshop, namespace)], f"kubectl apply -f {FILES[1]}   (it holds passwords)")
        write_private(roster, text)
        lines.append(f"roster Secret ({len(workshop.learners)} learners' URLs), mode 0600: {roster}")
    else:
        lines.append(f"no learners yet: `{command('up --url ...')}` first, then this again, for {FILES[1]}")
    helm = values(shown, namespace, image=image, memory=memory, cpu=cpu)
    header = (
        f"Helm values for the jupyterhub chart (Zero to JupyterHub), class {shown.class_name!r}, "
        "written by `workshop k8s`:\n"
        f"helm upgrade --install jhub jupyterhub/jupyterhub -n {namespace} -f {FILES[2]}\n"
        f"The learners' image {image} must have echoq installed; merge these with your own values."
    )
    write_private(target / FILES[2], _yaml([helm], header))
    lines.append(f"Helm values (hub.extraConfig.echoq, singleuser), mode 0600: {target / FILES[2]}")
    return lines


def load_all(path: Path) -> list[dict[str, Any]]:
    """The documents of a YAML file this module wrote (for the tests, and a look before applying)."""
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
