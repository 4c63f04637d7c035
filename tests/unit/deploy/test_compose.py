"""compose.yaml, the Dockerfile and deploy/, checked without a Docker engine: the file follows the
Compose Specification (its JSON schema, vendored here with its license); every file, folder and
command it names exists; each treespec command parses with the real command line; each address names
a service of the file and a port that service listens on; the model path is where `treespec models
import-default` writes; a co-located pair shares its sockets, IPC namespace and shared memory."""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from treespec.shared.cli.main import build_parser
from treespec.shared.cli.speculative_config import expand
from treespec.shared.drafting.registry import drafter_class
from treespec.shared.launcher.shared_cores import shared_core_env
from treespec.shared.model.store import MODELS_DIR_ENV, default_model_path

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = Path(__file__).with_name("compose-spec.json")
IMAGE = "treespec:latest"
# What the third-party images listen on (their documented defaults, as compose.yaml runs them).
IMAGE_PORTS = {"redis": {6379}, "prom/prometheus": {9090}, "jaegertracing/all-in-one": {4317, 4318, 16686}}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


@dataclass(frozen=True)
class Command:
    """A treespec service's command (or health check) as the real command line reads it."""

    service: str
    argv: tuple[str, ...]
    args: argparse.Namespace


def refuse_warning(message: str) -> None:
    raise AssertionError(f"treespec warns: {message}")


def parse(service: str, argv: list[str]) -> Command:
    try:
        args = build_parser().parse_args(expand(argv, refuse_warning))
    except SystemExit as exc:  # argparse has printed what it refused
        raise AssertionError(f"{service}: `treespec {shlex.join(argv)}` does not parse") from exc
    return Command(service, tuple(argv), args)


def treespec_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("image") == IMAGE}


def commands(services: dict[str, dict[str, Any]]) -> Iterator[Command]:
    for name, service in treespec_services(services).items():
        yield parse(name, service["command"])


def health_checks(services: dict[str, dict[str, Any]]) -> Iterator[Command]:
    for name, service in treespec_services(services).items():
        test = service.get("healthcheck", {}).get("test")
        if test is not None:
            assert test[:2] == ["CMD", "treespec"], f"{name}: health check {test} is not a treespec verb"
            yield parse(name, test[2:])


def listening_ports(service: dict[str, Any]) -> set[int]:
    if service.get("image") == IMAGE:
        args = parse("", service["command"]).args
        return {p for p in (getattr(args, "port", None), getattr(args, "metrics_port", None)) if p}
    image = service["image"].split(":")[0]
    return IMAGE_PORTS[image]


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("dns:///").rpartition(":")
    return host, int(port)


def profiles(service: dict[str, Any]) -> set[str]:
    return set(service.get("profiles", []))


def assert_reaches(services: dict[str, dict[str, Any]], source: str, host: str, port: int) -> None:
    """`source` addresses `host:port`: a service of the file, listening there, up whenever `source` is."""
    assert host in services, f"{source} addresses {host!r}, which is no service of compose.yaml"
    assert port in listening_ports(services[host]), (
        f"{source} addresses {host}:{port}; {host} listens elsewhere"
    )
    target = profiles(services[host])
    assert not target or target & profiles(services[source]), (
        f"{source} is up without profile {sorted(target)}, where {host} runs"
    )


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []
    broken = copy.deepcopy(compose)  # the schema does refuse what compose refuses
    broken["services"]["gateway"]["restart_policy"] = "always"
    assert not validator.is_valid(broken)


def test_every_file_and_folder_the_deployment_names_exists(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if "build" in service:
            context = ROOT / service["build"]["context"]
            assert context.is_dir(), name
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):  # a bind mount: the file must be in the repository
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
    builds = {json.dumps(s["build"], sort_keys=True) for s in treespec_services(services).values()}
    assert len(builds) == 1, "every treespec service runs the one image, built one way"


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def package_folders() -> set[str]:
    """The top folders of setup.py's FOLDERS (import name -> folder), read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "FOLDERS":
            folders: dict[str, str] = ast.literal_eval(node.value)
            return {folder.split("/")[0] for folder in folders.values()}
    raise AssertionError("setup.py has no FOLDERS")


def test_the_image_holds_the_whole_package_and_runs_treespec() -> None:
    instructions = dockerfile_instructions()
    copied: set[str] = set()
    for verb, rest in instructions:
        if verb == "COPY":
            *sources, _ = rest.split()
            copied.update(sources)
    for source in copied:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert package_folders() | {"pyproject.toml", "setup.py", pyproject["project"]["readme"]} <= copied
    assert ("ENTRYPOINT", '["treespec"]') in instructions
    assert "treespec" in pyproject["project"]["scripts"]
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert ".venv" in ignored and ".git" in ignored  # the context stays small
    assert not ignored & copied, "the Dockerfile copies what .dockerignore leaves out"
    user = [rest for verb, rest in instructions if verb == "USER"]
    assert user and user[-1] != "root"
    torch = next(rest for verb, rest in instructions if verb == "ARG" and rest.startswith("TORCH_SPEC="))
    makefile_pin = re.search(r"^TORCH_SPEC \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert makefile_pin is not None and torch == f'TORCH_SPEC="{makefile_pin.group(1)}"'


def test_every_treespec_command_and_health_check_parses(services: dict[str, dict[str, Any]]) -> None:
    verbs = {c.service: c.args.verb for c in commands(services)}
    assert verbs == {
        "model": "models",
        "drafter-ngram": "drafter",
        "verifier": "verifier",
        "gateway": "gateway",
        "verifier-eagle": "verifier",
        "drafter-eagle": "drafter",
        "gateway-eagle": "gateway",
    }
    for drafter in (c for c in commands(services) if c.args.verb == "drafter"):
        drafter_class(drafter.args.kind)  # a registered drafter (the command line takes any name)
    checked = {c.service for c in health_checks(services)}
    assert checked == set(verbs) - {"model"}  # every long-running service says when it is ready
    for check in health_checks(services):  # each asks its own service, on a port it listens on
        target = check.args.target
        port = urlsplit(target).port if "://" in target else host_port(target)[1]
        assert port in listening_ports(services[check.service]), check


def test_every_address_names_a_service_and_a_port_it_listens_on(services: dict[str, dict[str, Any]]) -> None:
    reached: list[tuple[str, str]] = []
    for c in commands(services):
        for flag in ("drafter_address", "verifier_address"):
            address = getattr(c.args, flag, None)
            if address and not address.startswith("local:"):
                host, port = host_port(address)
                assert_reaches(services, c.service, host, port)
                reached.append((c.service, host))
        for flag in ("ngram_redis_url", "responses_store_url"):
            url = getattr(c.args, flag, None)
            if url:
                parts = urlsplit(url)
                assert parts.scheme == "redis" and parts.hostname and parts.port
                assert_reaches(services, c.service, parts.hostname, parts.port)
                reached.append((c.service, parts.hostname))
    assert ("verifier", "drafter-ngram") in reached and ("gateway", "verifier") in reached
    assert ("drafter-ngram", "redis") in reached
    for source, target in reached:  # each starts after what it reaches
        assert target in services[source].get("depends_on", {}), f"{source} does not depend on {target}"
    endpoint = treespec_services(services)["verifier"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    host, port = host_port(urlsplit(re.sub(r"\$\{\w+:-(.*)\}", r"\1", endpoint)).netloc)
    assert host in services and port in listening_ports(services[host])


def test_prometheus_scrapes_each_metrics_port(services: dict[str, dict[str, Any]]) -> None:
    mount = next(
        v for v in services["prometheus"]["volumes"] if v.endswith("/etc/prometheus/prometheus.yml:ro")
    )
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    targets = {
        t for job in config["scrape_configs"] for group in job["static_configs"] for t in group["targets"]
    }
    for target in targets:
        host, port = host_port(target)
        assert host in services and port in listening_ports(services[host]), target
    metrics = {f"{c.service}:{c.args.metrics_port}" for c in commands(services) if c.args.verb == "verifier"}
    gateways = {f"{c.service}:{c.args.port}" for c in commands(services) if c.args.verb == "gateway"}
    assert targets == metrics | gateways


def test_the_model_path_is_where_the_model_service_imports_it(services: dict[str, dict[str, Any]]) -> None:
    model = next(c for c in commands(services) if c.service == "model")
    assert model.args.models_action == "import-default" and model.args.models_dir is None
    for name, service in treespec_services(services).items():
        models_dir = Path(service["environment"][MODELS_DIR_ENV])
        assert f"models:{models_dir}" in service["volumes"], name
        args = parse(name, service["command"]).args
        if getattr(args, "model_path", None) is not None:
            assert Path(args.model_path) == default_model_path(models_dir), name
            assert "model" in started_before(services, name), name
        if "model" in service.get("depends_on", {}):  # the import has finished, not just started
            assert service["depends_on"]["model"]["condition"] == "service_completed_successfully", name


def started_before(services: dict[str, dict[str, Any]], name: str) -> set[str]:
    """What compose starts (or, for `model`, completes) before `name`: its dependencies, theirs..."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for dependency in services[todo.pop()].get("depends_on", {}):
            if dependency not in found:
                found.add(dependency)
                todo.append(dependency)
    return found


def test_a_co_located_drafter_shares_sockets_ipc_and_memory_with_its_verifier(
    services: dict[str, dict[str, Any]],
) -> None:
    drafters = [c for c in commands(services) if c.args.verb == "drafter" and c.args.colocate]
    assert [d.service for d in drafters] == ["drafter-eagle"]
    for drafter in drafters:
        verifier = next(
            c
            for c in commands(services)
            if getattr(c.args, "colocation_socket", None) == drafter.args.colocate
        )
        assert verifier.args.drafter_address == f"local:{drafter.args.local_socket}"
        mine, theirs = services[drafter.service], services[verifier.service]
        assert mine["ipc"] == f"service:{verifier.service}" and theirs["ipc"] == "shareable"
        assert mine["depends_on"][verifier.service]["condition"] == "service_healthy"  # its socket is up
        # /dev/shm must hold the target's embedding and the feature ring (Docker's default: 64 MB)
        assert re.fullmatch(r"\d+gb?", theirs["shm_size"])
        for socket in (drafter.args.colocate, drafter.args.local_socket):
            shared = {v.split(":")[0] for v in mine["volumes"] if socket.startswith(v.split(":")[1] + "/")}
            assert shared and shared <= set(theirs["volumes"]) | {v.split(":")[0] for v in theirs["volumes"]}
        for service in (mine, theirs):
            assert shared_core_env({}).items() <= service["environment"].items()
