"""docker-compose.yml's structure (Docker is not on these machines; tests/test_production.py runs
the same topology without it): every service has a pinned image or a build, every FARM_* variable is
one the settings know, credentials only from .env (all named in .env.example), nothing published
beyond the host's loopback, health-gated dependencies, restart policies, volumes declared, a worker
per device pool, the deployments registered at start-up, and a .dockerignore that keeps the host's
venv out of the image. `problems()` is the check; a crafted compose file shows each rule fails."""

from __future__ import annotations

import copy
import re

import yaml

from farm.settings import Settings
from farmtest import REPO

TEXT = (REPO / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(TEXT)
LONG_RUNNING = {"postgres", "minio", "prefect-db", "prefect-server", "build-worker", "devices-worker"}


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    return env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


def _command(svc: dict) -> str:
    c = svc.get("command") or ""
    return " ".join(c) if isinstance(c, list) else str(c)


def _dockerfile_env(dockerfile: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"^ENV ([A-Z_]+)=(\S+)", dockerfile, re.M))


def problems(compose: dict, text: str, env_example: str, device_pools: set[str],
             dockerfile: str | None = None) -> list[str]:
    out = []
    dockerfile = (REPO / "infra/Dockerfile").read_text() if dockerfile is None else dockerfile
    services = compose["services"]
    fields = {f"FARM_{k.upper()}" for k in Settings.model_fields}
    example = {line.split("=", 1)[0] for line in env_example.splitlines() if line and not line.startswith("#")}
    missing = set(re.findall(r"\$\{([A-Z_]+)(?::-[^}]*)?\}", text)) - example
    if missing:
        out.append(f"variables missing from .env.example: {sorted(missing)}")
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        image = svc.get("image")
        if "image" not in svc and "build" not in svc:
            out.append(f"{name}: neither image nor build")
        elif image and "build" not in svc and (":" not in image or image.endswith(":latest")):
            out.append(f"{name}: image {image} is not pinned")
        for key, value in _env(svc).items():
            if key.startswith("FARM_") and key not in fields:
                out.append(f"{name}: {key} is not a farm setting")
            if re.search(r"PASSWORD|SECRET", key) and not re.fullmatch(r"\$\{[A-Z_]+\}", str(value)):
                out.append(f"{name}: {key} is a literal, not from .env")
            if "://" in str(value) and "@" in str(value) and "${" not in str(value):
                out.append(f"{name}: {key} embeds a literal credential")
        for port in svc.get("ports") or []:
            # Published beyond this host only where .env says so (PUBLISH_ADDRESS, loopback by default).
            if not str(port).startswith(("127.0.0.1:", "${PUBLISH_ADDRESS:-127.0.0.1}:")):
                out.append(f"{name} publishes {port} beyond the host")
        deps = svc.get("depends_on") or {}
        if not isinstance(deps, dict):
            out.append(f"{name}: depends_on without conditions")
            deps = {}
        for dep, cond in deps.items():
            want = "service_healthy" if "healthcheck" in services.get(dep, {}) else "service_completed_successfully"
            if (cond or {}).get("condition") != want:
                out.append(f"{name} -> {dep}: condition {(cond or {}).get('condition')}, not {want}")
        if name in LONG_RUNNING and svc.get("restart") != "unless-stopped":
            out.append(f"{name}: no restart policy")
        for v in svc.get("volumes") or []:
            if ":" in str(v) and not str(v).startswith(("/", ".")) and str(v).split(":", 1)[0] not in declared:
                out.append(f"{name}: volume {str(v).split(':', 1)[0]} not declared")
    for name in ("postgres", "minio", "prefect-db", "prefect-server"):
        if "healthcheck" not in services.get(name, {}):
            out.append(f"{name}: no healthcheck")
    commands = [_command(s) for s in services.values()]
    for pool in device_pools | {"build-pool"}:
        if not any(f"--pool {pool} " in c + " " and "worker start" in c for c in commands):
            out.append(f"no worker for pool {pool}")
    image_env = _dockerfile_env(dockerfile)
    owners: dict[str, str] = {}
    for name in ("build-worker", "devices-worker", "deployer"):
        svc = services.get(name, {})
        if not any(str(v).endswith(":/var/cache/farm") for v in svc.get("volumes") or []) or \
                _env(svc).get("FARM_CACHE") != "/var/cache/farm":
            out.append(f"{name}: FARM_CACHE is not a volume")
        for v in svc.get("volumes") or []:  # share nothing: a worker's disk is its own
            vol = str(v).split(":", 1)[0]
            if vol in owners:
                out.append(f"{name} shares volume {vol} with {owners[vol]}")
            owners[vol] = name
        # The toolchain env the service runs must be the one the image installed, off every volume.
        tc = _env(svc).get("FARM_TOOLCHAIN_PYTHON") or image_env.get("FARM_TOOLCHAIN_PYTHON")
        cache = _env(svc).get("FARM_CACHE") or image_env.get("FARM_CACHE")
        if tc is None:
            out.append(f"{name}: looks for the toolchain env under FARM_CACHE={cache}, where the image installed none")
        elif tc != image_env.get("FARM_TOOLCHAIN_PYTHON") or f"ln -s" not in dockerfile or \
                tc.rsplit("/bin/python", 1)[0] not in dockerfile.split("ln -s", 1)[1].split("\n", 1)[0]:
            out.append(f"{name}: FARM_TOOLCHAIN_PYTHON {tc} is not where the image links its toolchain env")
        elif any(tc.startswith(str(v).split(":", 2)[1].rstrip("/") + "/") for v in svc.get("volumes") or []
                 if ":" in str(v)):
            out.append(f"{name}: FARM_TOOLCHAIN_PYTHON {tc} is on a volume (an empty volume hides the image's env)")
    devices = _command(services.get("devices-worker", {}))
    if "--work-queue" not in devices:
        out.append("devices-worker pulls every device queue of its pool (no --work-queue)")
    deploy = _command(services.get("deployer", {}))
    if "farm deploy --pool build-pool" not in deploy or "farm deploy-devices" not in deploy:
        out.append("the deployments are not registered at start-up")
    if "TORCH_INDEX_URL" not in ((services.get("build-worker") or {}).get("build") or {}).get("args", {}):
        out.append("the CPU torch index is not a build arg")
    return out


def _pools() -> set[str]:
    return {d.get("work_pool") or "devices" for d in yaml.safe_load((REPO / "infra/devices.yaml").read_text())["devices"]}


def test_the_shipped_compose_file_has_no_problem():
    assert problems(COMPOSE, TEXT, (REPO / ".env.example").read_text(), _pools()) == []
    assert ".env" in (REPO / ".gitignore").read_text().split() and not (REPO / ".env").exists()


def test_each_rule_fails_on_a_crafted_compose_file():
    bad = copy.deepcopy(COMPOSE)
    s = bad["services"]
    s["minio"]["image"] = "minio/minio:latest"
    s["minio"]["ports"] = ["9000:9000"]
    s["postgres"]["environment"]["POSTGRES_PASSWORD"] = "farm"
    s["build-worker"]["environment"] = {**s["build-worker"]["environment"], "FARM_NO_SUCH": "1",
                                        "FARM_DATABASE_URL": "postgresql+psycopg://farm:farm@postgres/farm"}
    s["build-worker"]["depends_on"] = ["deployer"]
    s["prefect-server"].pop("restart")
    s["prefect-server"].pop("healthcheck")
    s["devices-worker"]["volumes"] = ["nowhere:/var/lib/farm"]
    s["deployer"]["command"] = ["farm", "db", "upgrade"]
    s["build-worker"]["volumes"] = ["deployer-cache:/var/cache/farm"]
    s["devices-worker"]["command"] = ["prefect", "worker", "start", "--pool", "devices", "--type", "process"]
    got = "\n".join(problems(bad, TEXT + "${UNLISTED}", "", _pools() | {"phones"}))
    for needle in ("minio: image minio/minio:latest is not pinned", "minio publishes 9000:9000",
                   "postgres: POSTGRES_PASSWORD is a literal", "FARM_NO_SUCH is not a farm setting",
                   "FARM_DATABASE_URL embeds a literal credential", "build-worker: depends_on without conditions",
                   "prefect-server: no restart policy", "prefect-server: no healthcheck",
                   "volume nowhere not declared", "no worker for pool phones", "devices-worker: FARM_CACHE",
                   "not registered at start-up", "UNLISTED", "deployer shares volume deployer-cache with build-worker",
                   "devices-worker pulls every device queue"):
        assert needle in got, needle


def test_the_toolchain_path_rules_fail_on_the_compose_file_that_stopped_every_build():
    """The negative control of issue 35's first finding: the image installed the toolchain env under
    FARM_CACHE=/opt/farm-cache and the services set FARM_CACHE=/var/cache/farm on an empty volume."""
    old_dockerfile = "ENV FARM_CACHE=/opt/farm-cache\nRUN .venv/bin/farm toolchain install\n"
    bad = copy.deepcopy(COMPOSE)
    for svc in bad["services"].values():
        if isinstance(svc.get("environment"), dict):
            svc["environment"].pop("FARM_TOOLCHAIN_PYTHON", None)
    got = problems(bad, TEXT, (REPO / ".env.example").read_text(), _pools(), dockerfile=old_dockerfile)
    assert "build-worker: looks for the toolchain env under FARM_CACHE=/var/cache/farm, where the image installed " \
           "none" in got
    moved = copy.deepcopy(COMPOSE)
    moved["services"]["build-worker"]["environment"] = {**moved["services"]["build-worker"]["environment"],
                                                       "FARM_TOOLCHAIN_PYTHON": "/var/cache/farm/tc/bin/python"}
    got = "\n".join(problems(moved, TEXT, (REPO / ".env.example").read_text(), _pools()))
    assert "build-worker: FARM_TOOLCHAIN_PYTHON /var/cache/farm/tc/bin/python is not where the image links" in got


def test_the_images_toolchain_step_runs_outside_docker(tmp_path):
    """infra/Dockerfile's toolchain RUN line, as written, on this machine (no Docker daemon here):
    /opt paths moved under tmp, FARM_CACHE the one `make setup` filled (the install is idempotent),
    so the link it makes is the env the services' FARM_TOOLCHAIN_PYTHON names and `farm toolchain
    versions` answers through it."""
    import subprocess

    from farm.settings import Settings

    dockerfile = (REPO / "infra/Dockerfile").read_text()
    run = next(block for block in dockerfile.split("\nRUN ")[1:] if "farm toolchain install" in block)
    run = run.split("\nENV ", 1)[0].replace("\\\n", " ")
    steps = run.split(" && ")
    steps = [st for st in steps if "python -m venv" not in st and "pip install" not in st]  # the venv is ours
    script = " && ".join(steps).replace("/tmp/", f"{tmp_path}/").replace(
        "/opt/farm-cache", str(Settings().cache)).replace("/opt/farm-toolchain", str(tmp_path / "farm-toolchain")).replace(
        ".venv/bin/farm", str(REPO / ".venv/bin/farm"))
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FARM_")}
    env["FARM_HOME"] = str(tmp_path / "home")
    proc = subprocess.run(["sh", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    link = tmp_path / "farm-toolchain" / "bin" / "python"
    assert link.exists()
    image_python = _dockerfile_env(dockerfile)["FARM_TOOLCHAIN_PYTHON"]
    assert image_python == "/opt/farm-toolchain/bin/python"
    for name in ("build-worker", "devices-worker", "deployer"):
        assert _env(COMPOSE["services"][name]).get("FARM_TOOLCHAIN_PYTHON", image_python) == image_python


def test_dockerignore_keeps_host_state_out_of_the_image():
    ignored = (REPO / ".dockerignore").read_text().split()
    for path in (".venv/", ".git/", ".env"):
        assert path in ignored
    assert "ARG TORCH_INDEX_URL" in (REPO / "infra/Dockerfile").read_text()
