"""docker-compose.yml's topology without Docker: a Prefect server on PostgreSQL, the artifact store
on an S3 HTTP endpoint (moto server), lineage on PostgreSQL, the deployments registered with
`farm deploy` (what the compose `deployer` runs), a process worker on build-pool, and a build created
through the API exactly as the UI's Run button does (the typed form's parameters), completed by the
worker and recorded in lineage, its bundle in the bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from farmtest import REPO, farm_env, run_farm, start_prefect_server, stop, wait_for_flow_run

pytestmark = pytest.mark.slow


@pytest.fixture
def prefect_on_postgres(pg_factory, tmp_path):
    home = tmp_path / "prefect"
    home.mkdir()
    proc, url, log = start_prefect_server(
        home, PREFECT_API_DATABASE_CONNECTION_URL=pg_factory().replace("postgresql://", "postgresql+asyncpg://"))
    yield url
    stop(proc, timeout=15)
    log.close()


def test_a_ui_build_on_the_production_topology(prefect_on_postgres, s3_server, pg_factory, tmp_path,
                                                toolchain_python):
    import boto3

    api = prefect_on_postgres
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    s3.create_bucket(Bucket="artifacts")
    env = farm_env(tmp_path / "home", api, FARM_DATABASE_URL=pg_factory(), FARM_STORE_URL="s3://artifacts/farm",
                   FARM_S3_ENDPOINT_URL=s3_server)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE"):
        env[var] = os.environ[var]
    assert run_farm(["db", "upgrade"], env).returncode == 0
    deployed = run_farm(["deploy", "--pool", "build-pool"], env)
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    assert "build-model/build" in deployed.stdout and "revalidate/revalidate" in deployed.stdout
    revalidate = httpx.get(f"{api}/deployments/name/revalidate/revalidate", timeout=10).json()
    assert revalidate["schedules"] and revalidate["schedules"][0]["schedule"]["interval"] == 3600

    worker_log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", "build-pool", "--type",
                               "process"], env={**env, "PATH": f"{REPO / '.venv/bin'}:{env['PATH']}"}, cwd=REPO,
                              stdout=worker_log, stderr=subprocess.STDOUT)
    try:
        dep = httpx.get(f"{api}/deployments/name/build-model/build", timeout=10).json()
        run = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", timeout=10, json={"parameters": {"params": {
            "model": "tiny-qwen35", "recipe": "dynamic_wi8_afp32", "run_gates": False, "run_devices": False}}}).json()
        state = wait_for_flow_run(api, run["id"], 900, why=lambda: (tmp_path / "worker.log").read_text()[-3000:])[
            "state_type"]
        assert state == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
    finally:
        stop(worker, timeout=20)
        worker_log.close()
    arts = json.loads(run_farm(["artifacts", "--kind", "litertlm", "--json"], env).stdout)["artifacts"]
    (bundle,) = arts
    assert bundle["name"] == "tiny-qwen35_dynamic_wi8_afp32.litertlm" and bundle["uri"].startswith("s3://artifacts/farm/")
    key = bundle["uri"].removeprefix("s3://artifacts/")
    assert s3.head_object(Bucket="artifacts", Key=key)["ContentLength"] == bundle["size"]
    assert not (tmp_path / "home" / "lineage.db").exists()
