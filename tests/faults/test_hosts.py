"""A farm of hosts that share nothing but its services (issue 35): simulated hosts on this machine, each in its own
UTS and pid namespace (`unshare --uts --pid --fork --mount-proc`: its own hostname, its own pids),
its own FARM_HOME and FARM_CACHE, sharing only a Prefect server, a PostgreSQL lineage database and an
S3 store (a moto server). Host A builds the tiny model and is killed — its whole pid namespace,
`kill -9` — while it holds the convert lease; its folders are then moved away. Host B builds the
same config: it waits while A's lease still beats (the negative control: with the stale bound long,
B is still waiting after several heartbeats), and with the bound short it breaks A's silent lease,
converts and finishes, and A's flow run ends Crashed. The rule this replaces (a lease is broken
early only when its holder has this host's name and a dead pid; otherwise after a 6-hour TTL)
would have left B waiting: A's holder names another host. Then hosts C and D, with empty folders,
gate, rebuild, card and publish from the services alone, and two hosts starting one new build at
once make each stage once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from farmtest import CONVERTER_RUNS, REPO, farm_env, run_farm
from farmtest.gates import TINY

pytestmark = pytest.mark.slow

if shutil.which("unshare") is None or os.geteuid() != 0:
    pytest.skip("simulated hosts need unshare as root", allow_module_level=True)

BEAT, STALE = 1.0, 6.0


def _host(name: str, args: list[str], env: dict[str, str], log: Path, module: str = "farm_cli") -> subprocess.Popen:
    """`python -m MODULE ARGS` (the farm CLI) as host `name`: its own hostname and pid namespace (pid
    1 is the command). The farm's stdout (its JSON) is piped; a worker's goes to its log."""
    cmd = ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c",
           f'hostname {name} && exec "$0" -m {module} "$@"', sys.executable, *args]
    err = open(log, "wb")
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE if module == "farm_cli" else err,
                            stderr=err, text=True, start_new_session=True)


def _polled(api: str, queue: str, timeout: float = 90) -> None:
    """Wait until a worker has polled the work queue `devices/<queue>`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{api}/work_pools/devices/queues/{queue}", timeout=5) as r:
                if json.loads(r.read()).get("last_polled"):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"no worker polled devices/{queue} within {timeout} s")


def _kill_host(proc: subprocess.Popen) -> None:
    """kill -9 of the namespace's init (the kernel then kills every process in it) and of unshare."""
    for child in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
        os.kill(int(child), signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _leases(db_url: str) -> list[tuple[str, str]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(text("SELECT holder, purpose FROM leases"))]
    except Exception:  # noqa: BLE001 - the table is made by the first farm process
        return []
    finally:
        engine.dispose()


def _runs_of(api: str, host: str) -> list[str]:
    body = json.dumps({"flow_runs": {"parent_task_run_id": {"is_null_": True}}, "sort": "START_TIME_DESC",
                       "limit": 200}).encode()
    req = urllib.request.Request(f"{api}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        runs = json.loads(r.read())
    return [r["state"]["type"] for r in runs if any(t.startswith(f"farm-owner:{host}.") for t in r["tags"])]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, pg_factory, s3_server, prefect_server, toolchain_python):
    """The shared services (a Prefect server, PostgreSQL lineage, an S3 bucket) and `env(name)`: a
    host's environment, its own FARM_HOME and FARM_CACHE under tmp/<name>."""
    import boto3

    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="farm-hosts")
    db = pg_factory()
    tmp_path = tmp_path_factory.mktemp("hosts")

    def env(name: str, **extra: str) -> dict[str, str]:
        own = tmp_path / name
        e = farm_env(own / "home", prefect_server, **{
            "FARM_CACHE": str(own / "cache"), "FARM_TOOLCHAIN_PYTHON": toolchain_python, "FARM_DATABASE_URL": db,
            "FARM_STORE_URL": "s3://farm-hosts/farm", "FARM_S3_ENDPOINT_URL": s3_server,
            "FARM_LEASE_HEARTBEAT_SECONDS": str(BEAT), "FARM_LEASE_STALE_SECONDS": str(STALE),
            **CONVERTER_RUNS, **extra})  # host A must be mid-export when it dies
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
                    "AWS_SHARED_CREDENTIALS_FILE"):
            if var in os.environ:
                e[var] = os.environ[var]
        return e

    return env, db, tmp_path


def _as_host(name: str, args: list[str], env: dict[str, str], log: Path, timeout: float = 900) -> tuple[int, str]:
    proc = _host(name, args, env, log)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_a_dead_host_holding_the_convert_lease_is_taken_over_within_the_bound(hosts, prefect_server):
    env, db, tmp = hosts
    a = _host("farm-host-a", ["build", str(TINY), "--no-gates", "--no-bench", "--json"], env("a"), tmp / "a.log")
    deadline = time.monotonic() + 600
    while not any(h.startswith("farm_host_a.") and "convert" in p for h, p in _leases(db)):
        assert a.poll() is None, (tmp / "a.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "host A never took the convert lease"
        time.sleep(0.2)
    _kill_host(a)
    (tmp / "a").rename(tmp / "a-gone")  # nothing of A's disk is where A left it (root reads any mode)
    # The control: B with a bound far longer than A's silence keeps waiting (a live holder's
    # lease is never broken early; here A is dead, and only the bound tells).
    waiting = _host("farm-host-b", ["build", str(TINY), "--no-gates", "--no-bench", "--json"],
                    env("b-patient", FARM_LEASE_STALE_SECONDS="3600"), tmp / "b-patient.log")
    time.sleep(4 * STALE)
    assert waiting.poll() is None, (tmp / "b-patient.log").read_text()[-3000:]
    assert any(h.startswith("farm_host_a.") and "convert" in p for h, p in _leases(db))
    _kill_host(waiting)
    # B with the bound: A's lease is broken once silent STALE seconds; B converts and finishes.
    t0 = time.monotonic()
    b = _host("farm-host-b", ["build", str(TINY), "--no-gates", "--no-bench", "--json"], env("b"), tmp / "b.log")
    out, _ = b.communicate(timeout=900)
    took = time.monotonic() - t0
    assert b.returncode == 0, (tmp / "b.log").read_text()[-4000:]
    summary = json.loads(out)
    # Lineage names the host of each stage: A recorded the source before it died, B made the rest.
    rec = run_farm(["lineage", summary["artifact"]["sha256"], "--json"], env("b"))
    assert rec.returncode == 0, rec.stderr[-2000:]
    rec = json.loads(rec.stdout)
    assert rec["source"]["host"] == "farm-host-a" and rec["float_export"]["host"] == "farm-host-b"
    assert rec["host"] == "farm-host-b" and rec["recipe"]["quantized_model"]["host"] == "farm-host-b"
    # A's source, rebuilt from the store rather than made again (the progress line is in B's log).
    assert any("rebuilt from the store" in p.read_text() and "recorded on host farm-host-a" in p.read_text()
               for p in (tmp / "b" / "home" / "logs").glob("farm-*.log"))
    # A's convert lease was broken, and its liveness lease dropped when its run was marked Crashed.
    assert not any(h.startswith("farm_host_a.") for h, _ in _leases(db)), _leases(db)
    assert took < 600, took
    # A's flow run, left Running by the kill, ended Crashed when B's run found A's liveness silent.
    assert _runs_of(prefect_server, "farm_host_a") == ["CRASHED"], _runs_of(prefect_server, "farm_host_a")


def test_another_host_gates_rebuilds_cards_and_publishes_from_the_shared_services_alone(hosts):
    """Share nothing, proven: host C (its own empty folders) builds the same config with gates —
    the source rebuilt from the store, every stage a cache hit —; host D (empty folders again)
    builds it once more (every gate reused), rebuilds it from its record (MATCH), renders the card
    and publishes the repository, all from Prefect, PostgreSQL and S3."""
    env, db, tmp = hosts
    rc, out = _as_host("farm-host-c", ["build", str(TINY), "--no-bench", "--json"], env("c"), tmp / "c.log")
    assert rc == 0, (tmp / "c.log").read_text()[-4000:]
    c = json.loads(out)
    stages = {st["name"]: st["status"] for st in c["stages"]}
    assert all(stages[k] == "cached" for k in ("convert", "quantize", "package", "hash")), stages
    assert all(g["status"] in ("pass", "warn") and g["host"] == "farm-host-c" for g in c["gates"]), c["gates"]
    sha = c["artifact"]["sha256"]
    rc, out = _as_host("farm-host-d", ["build", str(TINY), "--no-bench", "--json"], env("d"), tmp / "d.log")
    assert rc == 0, (tmp / "d.log").read_text()[-4000:]
    d = json.loads(out)
    assert d["artifact"]["sha256"] == sha and all(g["reused"] for g in d["gates"])
    rc, out = _as_host("farm-host-d", ["rebuild", sha, "--json"], env("d"), tmp / "d-rebuild.log")
    assert rc == 0 and json.loads(out)["verdict"] == "MATCH", (tmp / "d-rebuild.log").read_text()[-3000:]
    card = tmp / "d" / "card"
    rc, _ = _as_host("farm-host-d", ["card", "tiny-qwen35", "--out", str(card)], env("d"), tmp / "d-card.log")
    assert rc == 0 and (card / "CARD.md").is_file(), (tmp / "d-card.log").read_text()[-3000:]
    repo = tmp / "d" / "published"
    rc, _ = _as_host("farm-host-d", ["publish", "tiny-qwen35", "--to", str(repo)], env("d"), tmp / "d-pub.log")
    assert rc == 0, (tmp / "d-pub.log").read_text()[-3000:]
    assert any(p.suffix == ".litertlm" for p in repo.iterdir())


def test_two_hosts_starting_the_same_new_build_at_once_make_each_stage_once(hosts):
    env, db, tmp = hosts
    args = ["build", str(TINY), "--recipe", "weight_only_wi8", "--no-gates", "--no-bench", "--json"]
    procs = [_host(h, args, env(h), tmp / f"{h}.log") for h in ("farm-host-e", "farm-host-f")]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [(tmp / f"{h}.log").read_text()[-3000:]
                                                     for h in ("farm-host-e", "farm-host-f")]
    runs = [{st["name"]: st["status"] for st in json.loads(o)["stages"]} for o in outs]
    for stage in ("quantize", "package", "hash"):  # new for this recipe: made by one host, reused by the other
        assert sorted(r[stage] for r in runs) == ["cached", "ran"], runs
    assert len({json.loads(o)["artifact"]["sha256"] for o in outs}) == 1


def test_a_device_runs_on_the_host_it_belongs_to_and_a_down_host_is_reported_as_such(hosts):
    """Two hosts, each with its own local device (`host:` in the registry, a work queue each). Host A
    benchmarks a file: its own device in its own process, host B's through B's devices worker —
    each result names the host it ran on. With B's worker gone, B's device is `host_down` naming
    the host and the queue, not a device_error, and A's own device still measures."""
    env, db, tmp = hosts
    registry = tmp / "devices-two-hosts.yaml"
    registry.write_text(
        "defaults:\n  protocol: {prefill_tokens: 32, decode_tokens: 16, runs: 1, cache_mode: 'no', timeout_s: 600}\n"
        "devices:\n"
        "  - {id: local-cpu, name: unused, accelerators: [cpu], runner: {kind: local}, enabled: false}\n"
        "  - {id: cpu-host-a, name: host A's CPU, accelerators: [cpu], runner: {kind: local}, host: farm-host-a}\n"
        "  - {id: cpu-host-b, name: host B's CPU, accelerators: [cpu], runner: {kind: local}, host: farm-host-b}\n")
    # The bound must exceed the worker's poll interval (Prefect's default 10 s; 1 s here).
    extra = {"FARM_DEVICES_FILE": str(registry), "FARM_DEVICE_HOST_SILENT_S": "5", "PREFECT_WORKER_QUERY_SECONDS": "1"}
    listed = run_farm(["artifacts", "--kind", "litertlm", "--model", "tiny-qwen35", "--limit", "1", "--json"],
                      env("a2", **extra))
    assert listed.returncode == 0, listed.stderr[-2000:]
    sha = json.loads(listed.stdout)["artifacts"][0]["sha256"]
    deployed = run_farm(["deploy-devices"], env("a2", **extra))
    assert deployed.returncode == 0, deployed.stderr[-2000:]
    worker_env = {**env("b2", **extra), "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}"}
    worker = _host("farm-host-b", ["worker", "start", "--pool", "devices", "--work-queue", "cpu-host-b", "--type",
                                   "process"], worker_env, tmp / "b2-worker.log", module="prefect")
    try:
        _polled(env("a2")["PREFECT_API_URL"], "cpu-host-b")
        rc, out = _as_host("farm-host-a", ["bench", sha, "--json"], env("a2", **extra), tmp / "a2-bench.log")
        assert rc == 0, out + (tmp / "a2-bench.log").read_text()[-3000:] + (tmp / "b2-worker.log").read_text()[-3000:]
        got = {r["device"]: r for r in json.loads(out)["records"]}
        assert got["cpu-host-a"]["status"] == "verified" and got["cpu-host-a"]["host"] == "farm-host-a"
        assert got["cpu-host-b"]["status"] == "verified" and got["cpu-host-b"]["host"] == "farm-host-b", got
    finally:
        _kill_host(worker)
    time.sleep(7)  # past FARM_DEVICE_HOST_SILENT_S since the worker's last poll
    rc, out = _as_host("farm-host-a", ["bench", sha, "--json"], env("a2", **extra), tmp / "a2-bench2.log")
    got = {r["device"]: r for r in json.loads(out)["records"]}
    assert got["cpu-host-a"]["status"] == "verified", got
    down = got["cpu-host-b"]
    assert down["status"] == "failed" and down["failure_class"] == "host_down", down
    assert "farm-host-b" in down["evidence"][0] and "devices/cpu-host-b" in down["evidence"][0]
