"""`workshop k8s`: the class on Kubernetes, checked as far as a machine with no cluster allows.

* the manifests against Kubernetes' own API types: the models ``kubernetes_asyncio``
  generates from the Kubernetes OpenAPI spec (installed with ``jupyterhub-kubespawner``),
  walked strictly: every field known, of its type, the required ones present;
* the Helm values against the jupyterhub chart's published values schema, over the chart's
  defaults as Helm merges them (tests/data/k8s/z2jh: see its README);
* the snippet loaded by a real JupyterHub config into a real ``KubeSpawner``, whose pod
  manifest carries each learner's environment and limits (no cluster is contacted: the
  pod is built, never created);
* the ACL file loaded by a real valkey-server (the one server-tier test here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

# Imported here, at collection: jupyterhub's PAM module asks `ldconfig` for libpam when
# imported, a process the unit tier allows no test to start.
from jupyterhub.app import JupyterHub
from kubespawner import KubeSpawner

from echoq.errors import InvalidArgument
from echoq.teaching.workshop import acl, k8s
from echoq.teaching.workshop.admin import Learner, Workshop, class_settings
from tests.support.helpers import run_in_own_loop

Z2JH = Path(__file__).parent / "data" / "k8s" / "z2jh"
IMAGE = "ghcr.io/example/echoq-learner:2026.12"
HUB_USERS = {"ada": "Ada.Lovelace", "bob": "bob"}  # learner id -> hub user


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A workshop folder as `up --url ... --host <anything>` leaves it (no server needed to write it)."""
    where = tmp_path / "class"
    where.mkdir()
    workshop = Workshop(
        where, "class", "127.0.0.1", 6379, "redis://:admin-secret@127.0.0.1:6379/0", "teacher-secret",
        started=False, instructors=["ada.teacher"], settings=class_settings(2, {}),
        learners={lid: Learner(lid, hub.lower(), f"pw-{lid}", hub) for lid, hub in HUB_USERS.items()},
    )  # fmt: skip
    workshop.save()
    return where


@pytest.fixture
def written(folder: Path, tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path / "k8s"
    k8s.k8s(folder, out, image=IMAGE, memory="2G", cpu=1.5)
    assert {p.name for p in out.iterdir()} == set(k8s.FILES)
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in out.iterdir())
    assert "&id" not in (out / "echoq-valkey.yaml").read_text()  # no YAML anchors: read as written
    return {name: k8s.load_all(out / name) for name in k8s.FILES}


# -- Kubernetes' own types ------------------------------------------------------------------


def _check(data: Any, kind: str, where: str) -> None:
    """``data`` is a valid ``kind`` (an OpenAPI type name of kubernetes_asyncio): every key
    known, every value of its type, recursively."""
    from kubernetes_asyncio.client import models

    if kind.startswith("list["):
        assert isinstance(data, list), f"{where}: a list expected"
        for i, item in enumerate(data):
            _check(item, kind[5:-1], f"{where}[{i}]")
    elif kind.startswith("dict("):
        assert isinstance(data, dict), f"{where}: a map expected"
        for key, value in data.items():
            _check(value, kind[5:-1].split(", ", 1)[1], f"{where}.{key}")
    elif kind in ("str", "int", "bool", "float"):
        wanted = {"str": str, "int": int, "bool": bool, "float": (int, float)}[kind]
        assert isinstance(data, wanted) and (kind == "bool" or not isinstance(data, bool)), f"{where}: {kind}"
    elif kind == "object":  # IntOrString and free-form fields
        assert isinstance(data, (str, int, dict)), where
    else:
        model = getattr(models, kind)
        assert isinstance(data, dict), f"{where}: a {kind} expected"
        by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
        unknown = set(data) - set(by_json)
        assert not unknown, f"{where}: {kind} has no field {sorted(unknown)}"
        for key, value in data.items():
            _check(value, model.openapi_types[by_json[key]], f"{where}.{key}")
        # The generated model refuses a missing required field when it is built.
        model(**{by_json[k]: v for k, v in data.items() if not isinstance(v, (dict, list))}, **_required(model, data))


def _required(model: type, data: dict[str, Any]) -> dict[str, Any]:
    # Nested values stand in as placeholders: each is checked on its own above.
    return {attr: object() for attr, name in model.attribute_map.items() if isinstance(data.get(name), (dict, list))}


KINDS = {"ConfigMap": "V1ConfigMap", "Secret": "V1Secret", "StatefulSet": "V1StatefulSet", "Service": "V1Service"}


def test_the_manifests_are_valid_kubernetes_objects(written: dict[str, list[dict[str, Any]]]) -> None:
    documents = written["echoq-valkey.yaml"] + written["echoq-roster.yaml"]
    assert [d["kind"] for d in documents] == ["ConfigMap", "Secret", "StatefulSet", "Service", "Secret"]
    for document in documents:
        _check(document, KINDS[document["kind"]], document["kind"])
        assert document["metadata"]["namespace"] == "jhub"


def test_the_check_refuses_what_kubernetes_refuses(written: dict[str, list[dict[str, Any]]]) -> None:
    stateful = written["echoq-valkey.yaml"][2]
    stateful["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # misspelt
    with pytest.raises(AssertionError, match="V1Container has no field"):
        _check(stateful, "V1StatefulSet", "StatefulSet")
    service = written["echoq-valkey.yaml"][3]
    service["spec"]["ports"][0]["port"] = "6379"  # a port is a number
    with pytest.raises(AssertionError, match="port: int"):
        _check(service, "V1Service", "Service")
    del service["spec"]["ports"][0]["port"]  # required
    with pytest.raises(ValueError, match="port"):
        _check(service, "V1Service", "Service")


def test_the_server_is_configured_as_up_configures_one(written: dict[str, list[dict[str, Any]]]) -> None:
    config_map, secret, stateful, service = written["echoq-valkey.yaml"]
    config = dict(line.split(" ", 1) for line in config_map["data"]["valkey.conf"].splitlines())
    assert config["appendonly"] == "yes" and config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction" and config["maxmemory"] == "1gb"
    assert config["maxclients"] == class_settings(2, {})["maxclients"]
    assert "requirepass" not in config  # the admin is the ACL file's default user, by hash
    users = {line.split()[1]: line.split() for line in secret["stringData"]["users.acl"].splitlines()}
    assert set(users) == {"default", acl.INSTRUCTOR_USER, "ada", "bob"}
    text = secret["stringData"]["users.acl"]
    assert "admin-secret" not in text and "pw-ada" not in text and "teacher-secret" not in text
    # A learner's line is the rules `up` gives them, then every command they may send.
    ada = users["ada"]
    assert ada[2 : 2 + len(acl.learner_rules("ada", "class", "pw-ada"))] == acl.learner_rules("ada", "class", "pw-ada")
    assert {f"+{c}" for c in acl.learner_commands()} <= set(ada) and "+eval" not in ada
    pod = stateful["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == k8s.VALKEY_IMAGE
    assert service["spec"]["ports"][0]["port"] == k8s.PORT


def test_the_roster_names_the_service(written: dict[str, list[dict[str, Any]]]) -> None:
    roster = json.loads(written["echoq-roster.yaml"][0]["stringData"]["roster.json"])
    assert roster["hub_users"] == {"ada.lovelace": "ada", "bob": "bob"}
    url = roster["learners"]["ada"]["valkey_url"]
    assert url == f"redis://ada:pw-ada@{k8s.service_host('jhub')}:6379/0"  # a plain URL: the cap is the server's


# -- the chart's values schema ----------------------------------------------------------------


def _merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of values: maps merged key by key, anything else replaced."""
    out = dict(defaults)
    for key, value in given.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _chart() -> tuple[dict[str, Any], dict[str, Any]]:
    import yaml

    if not (Z2JH / "values.schema.yaml").is_file():
        pytest.skip(f"the jupyterhub chart's schema is not in {Z2JH} (see tests/data/k8s/README.md)")
    return (
        yaml.safe_load((Z2JH / "values.schema.yaml").read_text()),
        yaml.safe_load((Z2JH / "values.yaml").read_text()),
    )


def test_the_values_pass_the_charts_schema(written: dict[str, list[dict[str, Any]]]) -> None:
    import jsonschema

    schema, defaults = _chart()
    (values,) = written["values.yaml"]
    jsonschema.Draft7Validator(schema).validate(_merged(defaults, values))
    wrong = _merged(defaults, {"singleuser": {"memory": {"limits": "1G"}}})  # the key is `limit`
    with pytest.raises(jsonschema.ValidationError, match="limits"):
        jsonschema.Draft7Validator(schema).validate(wrong)
    wrong = _merged(defaults, {"singleuser": {"cpu": {"limit": "1"}}})  # a number, not a string
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(wrong)


# -- a real KubeSpawner ---------------------------------------------------------------------------


class _User:  # what a Spawner reads of the hub's user
    def __init__(self, name: str) -> None:
        self.name, self.id, self.url, self.escaped_name = name, 1, f"/user/{name}/", name


def _pod(values: dict[str, Any], roster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str) -> Any:
    # A kubeconfig naming a cluster that is never contacted: the spawner builds its pod only.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
        "clusters: [{name: none, cluster: {server: 'https://kubernetes.invalid'}}]\n"
        "contexts: [{name: none, context: {cluster: none, user: none}}]\nusers: [{name: none, user: {token: x}}]\n"
    )
    from kubernetes_asyncio.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))  # read at its import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "roster.json").write_text(roster)
    snippet = values["hub"]["extraConfig"]["echoq"]
    mount = f"{k8s.ROSTER_MOUNT}/roster.json"
    assert snippet.count(mount) == 1
    single = values["singleuser"]
    # What the chart's jupyterhub_config.py makes of `singleuser` (its documented mapping),
    # then the chart's extraConfig, as the chart runs it: in the hub's config file.
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        "c.JupyterHub.spawner_class = 'kubespawner.KubeSpawner'\n"
        "c.JupyterHub.authenticator_class = 'dummy'\n"  # the chart's default
        f"c.KubeSpawner.image = {single['image']['name'] + ':' + single['image']['tag']!r}\n"
        f"c.KubeSpawner.mem_limit = {single['memory']['limit']!r}\n"
        f"c.KubeSpawner.mem_guarantee = {single['memory']['guarantee']!r}\n"
        f"c.KubeSpawner.cpu_limit = {single['cpu']['limit']!r}\n"
        f"c.KubeSpawner.cpu_guarantee = {single['cpu']['guarantee']!r}\n"
        + snippet.replace(mount, str(tmp_path / "roster.json"))
    )
    hub = JupyterHub()
    hub.load_config_file(str(config))
    assert hub.spawner_class is KubeSpawner

    async def pod() -> Any:  # its Kubernetes client is made on the hub's event loop
        spawner = KubeSpawner(config=hub.config, user=_User(user), _mock=True)
        return await spawner.get_pod_manifest()

    return run_in_own_loop(pod)


def test_a_kubespawner_gives_each_learner_their_url_and_limits(
    written: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (values,) = written["values.yaml"]
    roster_text = written["echoq-roster.yaml"][0]["stringData"]["roster.json"]
    roster = json.loads(roster_text)
    pod = _pod(values, roster_text, tmp_path, monkeypatch, "Ada.Lovelace")
    (container,) = pod.spec.containers
    env = {e.name: e.value for e in container.env}
    assert env["VALKEY_URL"] == roster["learners"]["ada"]["valkey_url"]
    assert env["ECHOQ_LEARNER"] == "ada" and env["ECHOQ_CLASS"] == "class"
    assert container.image == IMAGE
    # JupyterHub reads 2G as 2 GiB (its units are 1024-based), and the pod asks for bytes.
    assert container.resources.limits == {"memory": 2 * 1024**3, "cpu": 1.5}
    assert container.resources.requests == {"memory": 2 * 1024**3, "cpu": 0.25}
    # A hub user not on the roster: solo mode, no class URL.
    pod = _pod(values, roster_text, tmp_path, monkeypatch, "carol")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["VALKEY_URL"] == "" and env["ECHOQ_LEARNER"] == ""


# -- the command --------------------------------------------------------------------------------


def test_without_a_workshop_the_admin_password_is_made_once(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    lines = k8s.k8s(tmp_path / "none", out, image=IMAGE)
    assert any("admin-password" in line for line in lines)
    password = (out / "admin-password").read_text().strip()
    assert not (out / "echoq-roster.yaml").exists()
    k8s.k8s(tmp_path / "none", out, image=IMAGE)  # again: the same password, the server's hash unchanged
    assert (out / "admin-password").read_text().strip() == password
    (config_map, secret, *_) = k8s.load_all(out / "echoq-valkey.yaml")
    assert secret["stringData"]["users.acl"].splitlines() == [
        f"user default on #{__import__('hashlib').sha256(password.encode()).hexdigest()} ~* &* +@all"
    ]
    assert "maxclients 10000" in config_map["data"]["valkey.conf"]


def test_the_guides_command(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from echoq.teaching.__main__ import main

    out = tmp_path / "k8s"
    argv = ["workshop", "k8s", "--dir", str(folder), "--out", str(out), "--namespace", "jhub"]
    assert main([*argv, "--image", "registry.example/echoq-learner:1"]) == 0
    assert "roster Secret (2 learners' URLs)" in capsys.readouterr().out
    (values,) = k8s.load_all(out / "values.yaml")
    assert values["singleuser"]["image"] == {"name": "registry.example/echoq-learner", "tag": "1"}
    assert main([*argv, "--image", "registry.example/echoq-learner:1", "--memory", "lots"]) == 2
    assert capsys.readouterr().err.count("\n") == 1  # one line, saying what to give


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"namespace": "JHub"}, "--namespace must be"),
        ({"memory": "2 GB"}, "--memory must be"),
        ({"cpu": 0.0}, "--cpu must be"),
        ({"image": ""}, "--image is needed"),
        ({"image": "echoq-learner@sha256:0f0f"}, "--image must be name:tag"),
    ],
)
def test_bad_input_changes_nothing(folder: Path, tmp_path: Path, given: dict[str, Any], said: str) -> None:
    out = tmp_path / "k8s"
    with pytest.raises(InvalidArgument, match=re.escape(said)):
        k8s.k8s(folder, out, **{"image": IMAGE, **given})
    assert not out.exists()


@pytest.mark.server
def test_a_server_started_on_the_acl_file_has_each_user_as_up_makes_them(folder: Path, tmp_path: Path) -> None:
    """The ACL file in the Secret, loaded by a real valkey-server with the ConfigMap's
    settings: every learner is the user `up`'s ACL SETUSER makes, and may do only that."""
    import redis

    from echoq.server import start_server

    workshop = Workshop.load(folder)
    (tmp_path / "users.acl").write_text(k8s.acl_file("admin-secret", workshop))
    config = dict(line.split(" ", 1) for line in k8s.server_config(workshop.settings).splitlines())
    for name in ("port", "bind", "dir"):  # the pod's own; here the test's
        del config[name]
    config["aclfile"] = str(tmp_path / "users.acl")
    (tmp_path / "data").mkdir()
    server = start_server(extra_config=config, password="admin-secret", workdir=tmp_path / "data")
    try:
        admin = redis.Redis.from_url(server.url)
        # The same rules sent by `up`'s set_user to a second user: the server sees no difference.
        acl.set_user(admin, "made-by-up", acl.learner_rules("ada", "class", "pw-ada"), acl.learner_commands())
        assert admin.acl_getuser("ada") == admin.acl_getuser("made-by-up")
        ada = redis.Redis(host=server.host, port=server.port, username="ada", password="pw-ada")
        assert ada.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            ada.eval("return 1", 0)
        assert admin.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        server.stop()
