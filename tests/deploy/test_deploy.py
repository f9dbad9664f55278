"""Deployment files: compose, Kubernetes, systemd, the installer and wheelhouse scripts.

No container engine or cluster is needed: the YAML is parsed and checked for the
properties other parts rely on (durable broker, one GPU per worker, queue per GPU class,
only documented KW_* variables), the shell scripts are syntax-checked, and the bare-metal
installer runs for real (``--no-systemctl``) into a temporary prefix with a tiny stand-in
package, so no network and no real project install are involved. ``docker compose
config`` and ``kubectl kustomize`` run when those clients are on the machine.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
INSTALLER = DEPLOY / "install-gpu-host.sh"
WHEELHOUSE = DEPLOY / "build-wheelhouse.sh"
ENV_EXAMPLE = DEPLOY / ".env.example"
GPU_CLASSES = ("h100", "h200", "b200")
SUITE_TIMEOUT_S = 1800  # KW_SUITE_TIMEOUT_S default: stop timeouts must cover it
KW_NAME = re.compile(r"\bKW_[A-Z0-9_]*[A-Z0-9]\b")


# ----------------------------------------------------------------------------- helpers


def env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=VALUE: {line!r}"
            values[key] = value
    return values


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc["_file"] = path.name
                docs.append(doc)
    return docs


def k8s(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def duration_s(text: str) -> int:
    """systemd/compose durations such as ``35min``, ``35m``, ``2100s``, ``1h 5min``."""
    units = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0
    for number, unit in re.findall(r"(\d+)\s*([a-z]*)", text):
        total += int(number) * units[unit or "s"]
    return total


def unit_settings(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            pairs.append((key.strip(), value.strip()))
    return pairs


# ----------------------------------------------------------------------------- compose


def test_compose_services_and_durable_broker() -> None:
    services = compose()["services"]
    assert {
        "redis",
        "postgres",
        "migrate",
        "api",
        "dashboard",
        "worker-gpu",
        "worker-cpu",
        "flower",
    } <= set(services)

    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert services["postgres"]["image"].startswith("postgres:16")
    assert any("/var/lib/postgresql/data" in v for v in services["postgres"]["volumes"])

    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    assert any(p.endswith(":8000:8000") for p in services["api"]["ports"])
    assert any(p.endswith(":8501:8501") for p in services["dashboard"]["ports"])
    assert any(p.endswith(":5555:5555") for p in services["flower"]["ports"])


def test_compose_healthchecks_and_start_order() -> None:
    services = compose()["services"]
    for name, service in services.items():
        if name != "migrate":
            assert "healthcheck" in service, f"{name} has no healthcheck"
    assert "pg_isready" in str(services["postgres"]["healthcheck"]["test"])
    assert "/healthz" in str(services["api"]["healthcheck"]["test"])
    for name in ("api", "dashboard", "worker-gpu", "worker-cpu"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["redis"]["condition"] == "service_healthy", name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("migrate", "api", "dashboard", "worker-gpu", "worker-cpu", "flower"):
        assert services[name]["env_file"] == ".env", name


def test_compose_gpu_worker_gets_exactly_one_gpu() -> None:
    worker = compose()["services"]["worker-gpu"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    (device,) = devices
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert len(device["device_ids"]) == 1 and "count" not in device
    assert worker["command"][0] == "--queues" and "gpu." in worker["command"][1]
    assert worker["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert duration_s(worker["stop_grace_period"]) > SUITE_TIMEOUT_S
    cpu = compose()["services"]["worker-cpu"]
    assert cpu["command"] == ["--queues", "cpu"]
    assert "deploy" not in cpu


def _compose_client() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_renders(tmp_path: Path) -> None:
    client = _compose_client()
    if client is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copy(ENV_EXAMPLE, tmp_path / "deploy" / ".env")
    compose_file = tmp_path / "deploy" / "compose.yaml"
    if client == ["docker-compose"]:
        # Compose v1 predates the top-level `name:` key; everything else it checks.
        data = yaml.safe_load(compose_file.read_text())
        data.pop("name", None)
        compose_file.write_text(yaml.safe_dump(data, sort_keys=False))
    result = subprocess.run(
        [*client, "-f", str(compose_file), "config"],
        capture_output=True,
        text=True,
        cwd=tmp_path / "deploy",
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)
    assert set(compose()["services"]) == set(rendered["services"])
    device = rendered["services"]["worker-gpu"]["deploy"]["resources"]["reservations"]
    assert device["devices"][0]["device_ids"] == ["0"]


# ----------------------------------------------------------------------------- kubernetes


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk - {"secret.example.yaml"}
    assert kustomization["namespace"] == "kernelwatch"
    replicas = {r["name"] for r in kustomization["replicas"]}
    assert {f"worker-{c}" for c in GPU_CLASSES} <= replicas


def test_k8s_redis_and_postgres_are_durable() -> None:
    redis = k8s("StatefulSet", "redis")
    (container,) = pod_spec(redis)["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert container["volumeMounts"][0]["mountPath"] == "/data"
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    postgres = k8s("StatefulSet", "postgres")
    (container,) = pod_spec(postgres)["containers"]
    assert container["image"].startswith("postgres:16")
    assert "pg_isready" in container["readinessProbe"]["exec"]["command"]
    assert postgres["spec"]["volumeClaimTemplates"]


def test_k8s_one_worker_deployment_per_gpu_class() -> None:
    workers = [
        d
        for d in k8s_docs()
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
        and d["metadata"]["labels"].get("kernelwatch/gpu-class") in GPU_CLASSES
    ]
    assert sorted(d["metadata"]["labels"]["kernelwatch/gpu-class"] for d in workers) == sorted(
        GPU_CLASSES
    )
    for doc in workers:
        cls = doc["metadata"]["labels"]["kernelwatch/gpu-class"]
        spec = pod_spec(doc)
        (container,) = spec["containers"]
        resources = container["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == 1, cls
        assert resources["limits"]["nvidia.com/gpu"] == 1, cls
        assert "cpu" not in resources["limits"], f"{cls}: a CPU limit throttles timings"
        assert container["args"] == ["--queues", f"gpu.{cls}"]
        assert cls.upper() in spec["nodeSelector"]["nvidia.com/gpu.product"]
        assert spec["terminationGracePeriodSeconds"] > SUITE_TIMEOUT_S
        assert "livenessProbe" not in container, f"{cls}: would kill busy workers"
        # A rollout must not wait for a spare GPU.
        assert doc["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_k8s_services_probes_and_migration() -> None:
    for name, port, path in (
        ("api", 8000, "/healthz"),
        ("dashboard", 8501, "/_stcore/health"),
        ("flower", 5555, "/healthcheck"),
    ):
        (container,) = pod_spec(k8s("Deployment", name))["containers"]
        assert container["ports"][0]["containerPort"] == port
        assert container["readinessProbe"]["httpGet"]["path"] == path
        assert k8s("Service", name)["spec"]["ports"][0]["port"] == port
    job = k8s("Job", "kernelwatch-migrate")
    (container,) = pod_spec(job)["containers"]
    assert container["args"] == ["db", "upgrade"]


def test_k8s_config_and_secret_references_exist() -> None:
    docs = k8s_docs()
    configmaps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        for container in pod_spec(doc)["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]]["stringData"], ref


def test_kubectl_kustomize_builds() -> None:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "kernelwatch", obj["metadata"]["name"]
    assert sum(o["kind"] == "Deployment" for o in objects) >= len(GPU_CLASSES) + 3


# ----------------------------------------------------------------------------- variables


def test_every_kw_variable_used_is_documented() -> None:
    documented = {k for k in env_example() if k.startswith("KW_")}
    used: dict[str, set[str]] = {}
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and p != ENV_EXAMPLE]
    files += [REPO / "docs" / "deploy.md"]
    for path in files:
        if path.exists():
            for name in KW_NAME.findall(path.read_text()):
                used.setdefault(name, set()).add(str(path.relative_to(REPO)))
    undocumented = {k: v for k, v in used.items() if k not in documented}
    assert not undocumented, f"KW_ variables missing from deploy/.env.example: {undocumented}"

    # Structured places too: compose environments and k8s env / ConfigMap / Secret keys.
    for service in compose()["services"].values():
        for key in service.get("environment", {}):
            assert not key.startswith("KW_") or key in documented, key
    for doc in k8s_docs():
        keys = list(doc.get("data", {})) + list(doc.get("stringData", {}))
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            keys += [e["name"] for c in pod_spec(doc)["containers"] for e in c.get("env", [])]
        for key in keys:
            assert not key.startswith("KW_") or key in documented, (doc["_file"], key)


def test_env_example_documents_every_variable_the_code_reads() -> None:
    """.env.example == the Settings fields plus KW_* names the package reads directly."""
    try:
        from kernelwatch.db.config import Settings
    except ImportError as exc:  # pragma: no cover - the package is installed in dev and CI
        pytest.skip(f"kernelwatch not importable: {exc}")
    read = {f"KW_{name.upper()}" for name in Settings.model_fields}
    for folder in ("db", "jobs", "worker", "dashboard", "kernels"):
        for path in (REPO / folder).rglob("*.py"):
            read |= {n for n in KW_NAME.findall(path.read_text()) if not n.startswith("KW_TEST_")}
    documented = {k for k in env_example() if k.startswith("KW_")}
    assert read == documented, {
        "not documented": read - documented,
        "documented but never read": documented - read,
    }
    for line in ENV_EXAMPLE.read_text().splitlines():
        assert not line.startswith(("export ", '"')), line


def deploy_command_lines() -> list[tuple[str, list[str]]]:
    """Every ``kernelwatch ...`` argument list the deployment files run."""
    lines: list[tuple[str, list[str]]] = []
    for name, service in compose()["services"].items():
        entry = service.get("entrypoint")
        if service.get("image", "").startswith("${KERNELWATCH_WORKER_IMAGE"):
            lines.append((f"compose:{name}", ["worker", *service["command"]]))
        elif entry is None and "KERNELWATCH_IMAGE" in service.get("image", ""):
            lines.append((f"compose:{name}", service["command"]))
        elif entry and entry[-2:] == ["kernelwatch", "worker"]:
            lines.append((f"compose:{name}", ["worker", *service["command"]]))
    for doc in k8s_docs():
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        for container in pod_spec(doc)["containers"]:
            command = container.get("command", [])
            args = container["args"]
            if command and command[-1] != "kernelwatch":
                continue  # not the kernelwatch command line (flower runs celery)
            if not command and container["image"].startswith("kernelwatch-worker"):
                args = ["worker", *args]  # the worker image's entrypoint is `kernelwatch worker`
            lines.append((f"k8s:{doc['metadata']['name']}", args))
    for unit in sorted(SYSTEMD.glob("*.service")):
        settings = unit_settings(unit)
        env = {}
        for key, value in settings:
            if key == "Environment":
                name, _, val = value.strip('"').partition("=")
                env[name] = val
        argv = dict(settings)["ExecStart"].split()[1:]
        expanded = [w for a in argv for w in (env.get(a[1:], "").split() if a[0] == "$" else [a])]
        lines.append((f"systemd:{unit.name}", expanded))
    cmd = re.search(r"^CMD (\[.*\])$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert cmd
    lines.append(("Dockerfile:CMD", yaml.safe_load(cmd.group(1))))
    return lines


DEPLOY_COMMANDS = deploy_command_lines()


@pytest.mark.parametrize(("where", "argv"), DEPLOY_COMMANDS, ids=[w for w, _ in DEPLOY_COMMANDS])
def test_deploy_commands_match_the_cli(where: str, argv: list[str]) -> None:
    cli = pytest.importorskip("kernelwatch.jobs.cli.main")
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if argv[0] not in commands.choices:
        pytest.skip(f"`kernelwatch {argv[0]}` is not implemented yet ({where})")
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: `kernelwatch {' '.join(argv)}` is rejected by the CLI ({exc})")


# ----------------------------------------------------------------------------- systemd


def test_worker_unit_template() -> None:
    settings = unit_settings(SYSTEMD / "kernelwatch-worker@.service")
    assert ("Environment", "CUDA_VISIBLE_DEVICES=%i") in settings
    assert ("EnvironmentFile", "/etc/kernelwatch/env") in settings
    assert ("Restart", "always") in settings
    assert ("KillMode", "mixed") in settings
    stop = dict(settings)["TimeoutStopSec"]
    assert duration_s(stop) > SUITE_TIMEOUT_S
    assert dict(settings)["ExecStart"].startswith("/opt/kernelwatch/venv/bin/kernelwatch worker")
    for name in (
        "kernelwatch-api.service",
        "kernelwatch-dashboard.service",
        "kernelwatch-worker-cpu.service",
    ):
        settings = unit_settings(SYSTEMD / name)
        assert ("EnvironmentFile", "/etc/kernelwatch/env") in settings, name
        assert ("Restart", "always") in settings, name


# ----------------------------------------------------------------------------- scripts


@pytest.mark.parametrize("script", [INSTALLER, WHEELHOUSE], ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path) -> None:
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script.read_text()
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("script", [INSTALLER, WHEELHOUSE], ids=lambda p: p.name)
def test_shell_scripts_help(script: Path) -> None:
    result = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "Usage:" in result.stdout


def test_healthcheck_http(tmp_path: Path) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        script = str(DEPLOY / "healthcheck.py")
        ok = subprocess.run([sys.executable, script, "http", f"{base}/healthz"], timeout=30)
        bad = subprocess.run(
            [sys.executable, script, "http", f"{base}/down"], capture_output=True, timeout=30
        )
        assert ok.returncode == 0
        assert bad.returncode == 1
    finally:
        server.shutdown()
        server.server_close()


HC_APP = """\
from celery import Celery

app = Celery("deploy_healthcheck", broker={broker!r})
"""


@pytest.mark.redis
@pytest.mark.slow
def test_healthcheck_worker_answers_only_for_its_own_host(tmp_path: Path) -> None:
    import redis

    broker = os.environ.get("KW_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/14"
    try:
        redis.Redis.from_url(broker).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis: {exc}")
    (tmp_path / "hcapp.py").write_text(HC_APP.format(broker=broker))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    celery = str(Path(sys.executable).with_name("celery"))
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [celery, "-A", "hcapp", "worker", "-P", "solo", "-n", f"probe-{os.getpid()}@%h",
         "--loglevel", "INFO", "--logfile", str(log)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    script = str(DEPLOY / "healthcheck.py")
    other_host = (
        "import runpy, socket, sys; socket.gethostname = lambda: 'not-this-host'; "
        "sys.argv = ['hc', 'worker', 'hcapp.app', '2']; "
        f"runpy.run_path({script!r}, run_name='__main__')"
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and " ready." in log.read_text()):
            assert worker.poll() is None and time.monotonic() < deadline, "worker did not start"
            time.sleep(0.2)
        ok = subprocess.run(
            [sys.executable, script, "worker", "hcapp.app", "2"],
            cwd=tmp_path, env=env, capture_output=True, timeout=60,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        elsewhere = subprocess.run(
            [sys.executable, "-c", other_host], cwd=tmp_path, env=env, capture_output=True,
            timeout=60,
        )  # fmt: skip
        assert elsewhere.returncode == 1
    finally:
        worker.terminate()
        worker.wait(timeout=30)


# ----------------------------------------------------------------------------- installer

STUB_BACKEND = '''\
"""In-tree PEP 517 backend: builds the stand-in wheel without setuptools or network."""
import base64, hashlib, os, zipfile

DIST = "kernelwatch-0.0.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def _files():
    with open(os.path.join(HERE, "kernelwatch_stub.py")) as f:
        module = f.read()
    return {
        "kernelwatch_stub.py": module,
        DIST + ".dist-info/METADATA":
            "Metadata-Version: 2.1\\nName: kernelwatch\\nVersion: 0.0.0\\n",
        DIST + ".dist-info/WHEEL":
            "Wheel-Version: 1.0\\nGenerator: stub\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
        DIST + ".dist-info/entry_points.txt":
            "[console_scripts]\\nkernelwatch = kernelwatch_stub:main\\n",
    }


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = DIST + "-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for path, text in _files().items():
            data = text.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append("%s,sha256=%s,%d" % (path, digest.decode(), len(data)))
        record.append(DIST + ".dist-info/RECORD,,")
        zf.writestr(DIST + ".dist-info/RECORD", "\\n".join(record) + "\\n")
    return name
'''

STUB_MODULE = '''\
"""Stand-in `kernelwatch` command: records its arguments and KW_* environment."""
import json, os, sys


def main():
    data_dir = os.environ.get("KW_DATA_DIR")
    if data_dir and os.path.isdir(os.path.dirname(data_dir)):
        os.makedirs(data_dir, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k.startswith("KW_")}
        with open(os.path.join(data_dir, "calls.jsonl"), "a") as f:
            f.write(json.dumps({"argv": sys.argv[1:], "env": env}) + "\\n")
    return 0
'''

STUB_PYPROJECT = """\
[build-system]
requires = []
build-backend = "_stub_backend"
backend-path = ["."]
"""


@pytest.fixture
def stub_source(tmp_path: Path) -> Path:
    src = tmp_path / "stub-src"
    src.mkdir()
    (src / "pyproject.toml").write_text(STUB_PYPROJECT)
    (src / "_stub_backend.py").write_text(STUB_BACKEND)
    (src / "kernelwatch_stub.py").write_text(STUB_MODULE)
    return src


class Host:
    """Paths of one fake host, and the installer run against them."""

    def __init__(self, root: Path, source: Path) -> None:
        self.root = root
        self.prefix = root / "kw-prefix"
        self.systemd = root / "etc" / "systemd" / "system"
        self.config = root / "etc" / "kw-config"
        self.wants = self.systemd / "multi-user.target.wants"
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.source = source

    def install(
        self, *args: str, check: bool = True, path: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}:{path or os.environ['PATH']}",
            "HOME": str(self.root),
            "PIP_NO_INDEX": "1",  # no network: everything comes from the stub or wheelhouse
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1",
            "LC_ALL": "C.UTF-8",
        }
        cmd = [
            "bash",
            str(INSTALLER),
            "--no-systemctl",
            "--python",
            sys.executable,
            "--prefix",
            str(self.prefix),
            "--systemd-dir",
            str(self.systemd),
            "--config-dir",
            str(self.config),
            *args,
        ]
        if "--wheelhouse" not in args:
            cmd += ["--source", str(self.source)]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def fake_nvidia_smi(self, script: str) -> None:
        tool = self.bin / "nvidia-smi"
        tool.write_text("#!/bin/sh\n" + script)
        tool.chmod(0o755)

    def enabled(self) -> dict[str, str]:
        if not self.wants.is_dir():
            return {}
        return {p.name: os.readlink(p) for p in self.wants.iterdir()}

    def snapshot(self) -> dict[str, tuple[str, int]]:
        state = {}
        for base in (self.systemd, self.config):
            for path in sorted(base.rglob("*")):
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    state[str(path)] = ("link:" + os.readlink(path), 0)
                elif stat.S_ISREG(mode):
                    state[str(path)] = (path.read_text(), stat.S_IMODE(mode))
        return state


@pytest.fixture
def host(tmp_path: Path, stub_source: Path) -> Host:
    return Host(tmp_path / "host", stub_source)


@pytest.mark.slow
def test_installer_writes_units_per_gpu_and_is_idempotent(host: Host) -> None:
    first = host.install("--gpus", "2")
    assert (host.prefix / "venv" / "bin" / "python").exists()
    assert os.access(host.prefix / "venv" / "bin" / "kernelwatch", os.X_OK)

    template = host.systemd / "kernelwatch-worker@.service"
    settings = unit_settings(template)
    assert ("Environment", "CUDA_VISIBLE_DEVICES=%i") in settings
    assert ("EnvironmentFile", f"{host.config}/env") in settings
    assert dict(settings)["ExecStart"] == f"{host.prefix}/venv/bin/kernelwatch worker $WORKER_ARGS"
    assert "/opt/kernelwatch" not in template.read_text()
    for name in ("kernelwatch-api.service", "kernelwatch-dashboard.service"):
        assert (host.systemd / name).exists()
    # One enabled worker per GPU, each an instance of the template (CUDA_VISIBLE_DEVICES=%i).
    assert host.enabled() == {
        "kernelwatch-worker@0.service": "../kernelwatch-worker@.service",
        "kernelwatch-worker@1.service": "../kernelwatch-worker@.service",
    }
    for instance in host.enabled():
        assert (host.wants / instance).resolve() == template.resolve()
    env_file = host.config / "env"
    assert env_file.read_text() == ENV_EXAMPLE.read_text()
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o640
    assert "edit its secrets" in first.stderr

    # Re-run, GPUs found by nvidia-smi this time (MIG lines are not GPUs): same state.
    before = host.snapshot()
    host.fake_nvidia_smi(
        "echo 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\n"
        "echo '  MIG 1g.18gb     Device  0: (UUID: MIG-b)'\n"
        "echo 'GPU 1: NVIDIA H200 (UUID: GPU-c)'\n"
    )
    again = host.install("--gpus", "auto")
    assert host.snapshot() == before
    assert "reusing virtual environment" in again.stdout
    assert "wrote" not in again.stdout

    # Fewer GPUs: the extra instance is disabled. None: one cpu-queue worker instead.
    host.install("--gpus", "1", "--queues", "gpu.h200")
    assert set(host.enabled()) == {"kernelwatch-worker@0.service"}
    assert 'Environment="WORKER_ARGS=--queues gpu.h200"' in template.read_text()
    host.install("--gpus", "0")
    assert host.enabled() == {"kernelwatch-worker-cpu.service": "../kernelwatch-worker-cpu.service"}

    if shutil.which("systemd-analyze"):
        # The instance resolves to the template in the same directory. systemd-analyze
        # exits 0 on ignored settings, so its warnings are read: unknown keys, keys in
        # the wrong section and unparsable values all fail here.
        units = [
            str(host.systemd / n)
            for n in (
                "kernelwatch-worker@0.service",
                "kernelwatch-worker-cpu.service",
                "kernelwatch-api.service",
                "kernelwatch-dashboard.service",
            )
        ]
        result = subprocess.run(
            ["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60
        )
        for line in result.stderr.splitlines():
            assert not re.search(r"Unknown key|Unknown section|Failed to parse|Invalid", line), line


@pytest.mark.slow
def test_installer_migrate_passes_env_values_as_data(host: Host, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data_dir = tmp_path / "data"
    env = ENV_EXAMPLE.read_text()
    env = env.replace("KW_DATA_DIR=/var/lib/kernelwatch", f"KW_DATA_DIR={data_dir}")
    tricky = f"$(touch {marker})`touch {marker}`;touch {marker}"
    env = env.replace("KW_WEBHOOK_SECRET=change-me-webhook-secret", f"KW_WEBHOOK_SECRET={tricky}")
    env += 'KW_GITHUB_API_URL="https://ghe.example.com/api/v3"\n'
    env_file = tmp_path / "kw.env"
    env_file.write_text(env)

    host.install("--gpus", "1", "--env-file", str(env_file), "--migrate")
    calls = [yaml.safe_load(line) for line in (data_dir / "calls.jsonl").read_text().splitlines()]
    assert [c["argv"] for c in calls] == [["db", "upgrade"]]
    assert calls[0]["env"]["KW_WEBHOOK_SECRET"] == tricky
    assert calls[0]["env"]["KW_GITHUB_API_URL"] == "https://ghe.example.com/api/v3"
    assert not marker.exists()
    assert (host.config / "env").read_text() == env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefix", "/tmp/with space"], "--prefix must be an absolute path"),
        (["--prefix", "relative/dir"], "--prefix must be an absolute path"),
        (["--systemd-dir", "/etc/%n"], "--systemd-dir must be an absolute path"),
        (["--queues", "gpu.h100;touch /tmp/x"], "--queues"),
        (["--queues", "--help"], "--queues"),
        (["--gpus", "two"], "--gpus"),
        (["--user", "root;id"], "--user"),
        (["--frobnicate"], "unknown argument"),
    ],
)
def test_installer_rejects_unsafe_arguments(host: Host, args: list[str], message: str) -> None:
    result = host.install("--gpus", "1", *args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert not host.systemd.exists()


def test_installer_fails_when_nvidia_smi_fails(host: Host) -> None:
    host.fake_nvidia_smi("echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    result = host.install("--gpus", "auto", check=False)
    assert result.returncode != 0
    assert "nvidia-smi -L failed" in result.stderr
    assert not host.systemd.exists()


def _path_without(tmp_path: Path, tool: str) -> str:
    """A PATH with every command of this one but ``tool`` (links in one folder)."""
    folder = tmp_path / f"path-without-{tool}"
    folder.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for exe in Path(d).glob("*") if Path(d).is_dir() else []:
            link = folder / exe.name
            if exe.name != tool and not link.exists() and os.access(exe, os.X_OK):
                link.symlink_to(exe)
    return str(folder)


def test_installer_refuses_a_host_without_bubblewrap(host: Host, tmp_path: Path) -> None:
    # the worker would fail every run closed: say so at install time, with the fix
    path = _path_without(tmp_path, "bwrap")
    result = host.install("--gpus", "0", check=False, path=path)
    assert result.returncode != 0
    assert "bubblewrap (bwrap) is not installed" in result.stderr
    assert "apt-get install bubblewrap" in result.stderr
    assert not host.systemd.exists()
    # trusted code only, said in the environment file: the host installs
    trusted = tmp_path / "trusted.env"
    trusted.write_text((REPO / "deploy" / ".env.example").read_text() + "KW_SANDBOX=none\n")
    host.install("--gpus", "0", "--env-file", str(trusted), path=path)


def _wheel_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stub_wheelhouse(tmp_path: Path, stub_source: Path) -> Iterator[Path]:
    wheelhouse = tmp_path / "wheelhouse"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-index",
            "-q",
            "--wheel-dir",
            str(wheelhouse),
            str(stub_source),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
    )
    (wheel,) = wheelhouse.glob("*.whl")
    (wheelhouse / "SHA256SUMS").write_text(f"{_wheel_sha256(wheel)}  {wheel.name}\n")
    yield wheelhouse


@pytest.mark.slow
def test_installer_offline_from_wheelhouse(host: Host, stub_wheelhouse: Path) -> None:
    host.install("--gpus", "1", "--wheelhouse", str(stub_wheelhouse), "--system-site-packages")
    venv_python = host.prefix / "venv" / "bin" / "python"
    assert os.access(host.prefix / "venv" / "bin" / "kernelwatch", os.X_OK)
    assert set(host.enabled()) == {"kernelwatch-worker@0.service"}
    if sys.prefix != sys.base_prefix:
        # --python was itself a venv (like a GPU image's torch venv): its packages (here
        # PyYAML) are visible in the new venv, after the venv's own.
        probe = subprocess.run(
            [str(venv_python), "-c", "import yaml, kernelwatch_stub; print(yaml.__file__)"],
            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.startswith(sys.prefix)

    (wheel,) = stub_wheelhouse.glob("*.whl")
    digest = base64.b16encode(hashlib.sha256(b"tampered").digest()).decode().lower()
    (stub_wheelhouse / "SHA256SUMS").write_text(f"{digest}  {wheel.name}\n")
    result = host.install("--gpus", "1", "--wheelhouse", str(stub_wheelhouse), check=False)
    assert result.returncode != 0
    assert "does not match its SHA256SUMS" in result.stderr


# ----------------------------------------------------------------------------- NVML


def _wheelhouse_requirements(tmp_path: Path, requires: list[str]) -> list[str]:
    """What build-wheelhouse.sh's METADATA reader keeps of ``requires`` (its own code, run)."""
    script = WHEELHOUSE.read_text()
    body = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    wheel = tmp_path / "kernelwatch-0.1.0-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: kernelwatch\nVersion: 0.1.0\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    import zipfile

    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("kernelwatch-0.1.0.dist-info/METADATA", meta)
    done = subprocess.run(
        [sys.executable, "-", str(wheel), "0"], input=body, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_gpu_install_path_installs_nvml(tmp_path: Path) -> None:
    """nvidia-ml-py is the ``gpu`` extra, and the installer, wheelhouse and image take it."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    gpu = project["optional-dependencies"]["gpu"]
    assert any(r.startswith("nvidia-ml-py") for r in gpu)
    assert not any(r.startswith("nvidia-ml-py") for r in project["dependencies"])  # CPU hosts
    installer = INSTALLER.read_text()
    assert '"kernelwatch[gpu]"' in installer and '"${source_dir}[gpu]"' in installer
    assert 'pip install "/src[gpu]"' in (DEPLOY / "Dockerfile.worker").read_text()
    kept = _wheelhouse_requirements(
        tmp_path,
        [
            "torch>=2.4",
            "celery[redis]>=5.4",
            'nvidia-ml-py>=12.535; extra == "gpu"',
            'pytest>=8; extra == "dev"',
        ],
    )
    assert kept == ["celery[redis]>=5.4", "nvidia-ml-py>=12.535"]
