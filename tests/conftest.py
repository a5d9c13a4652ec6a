"""Shared fixtures: dummy AWS credentials, a moto S3 server, PostgreSQL databases, a real Prefect
server, the toolchain env, and the session's one real build of the tiny Qwen3.5. Helpers that are
not fixtures live in tests/farmtest/."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from farmtest import Built, farm_env, free_port, run_farm, start_prefect_server, stop


# The suite's float exports are kept between runs, under FARM_CACHE (like the toolchain envs), at
# most this many bytes (the SmolLM2 and Gemma 3 exports are ~0.5 and ~1.1 GB; the rest are MBs).
EXPORT_CACHE_BYTES = 6 << 30


def pytest_configure(config):
    """One FARM_EXPORT_CACHE for the suite (farm/export_cache.py), kept between runs in FARM_CACHE:
    the suite's farms share no lineage, and each exported the same models again (the tiny Qwen3.5
    17 times in one run, ~50 s each on 2 cores; 65 converts were ~2,450 s of the 5,722 s of worker
    time of the 2026-12-07 run on the AMD EPYC). An entry is keyed by the convert stage's key — the
    source's content, the family, the export settings and the toolchain's identity (its packages
    and the code of farm_toolchain/ and farm_common/) — so a change to any of them converts afresh;
    the same key replays bytes litert-torch made from exactly those inputs. Tests that watch or
    interrupt the converter turn it off (farmtest.CONVERTER_RUNS) and convert in every run, and
    `farm rebuild` never reads it (test_rebuild.py: its MATCH is the converter's own determinism).
    A cold run (every model converted, as on a new machine or after a toolchain change):
    `FARM_EXPORT_CACHE=$(mktemp -d) make test`."""
    if not hasattr(config, "workerinput") and "FARM_EXPORT_CACHE" not in os.environ:
        from farm import export_cache
        from farm.settings import Settings

        cache = Settings().cache / "test-exports"
        cache.mkdir(parents=True, exist_ok=True)
        export_cache.prune(cache, EXPORT_CACHE_BYTES)
        os.environ["FARM_EXPORT_CACHE"] = str(cache)
    _own_worker_cache(config)


def _own_worker_cache(config):
    """Under pytest-xdist each worker gets a FARM_CACHE of its own (the farm commands and the
    in-process resources of its tests read it), sharing only what tests never change: the toolchain
    envs and the joined Gemma GGUF. Tests move, edit and delete files of a recorded source folder
    (the reference must come from the store), and a generated model's folder lives in FARM_CACHE:
    shared, another worker's build found it gone and made it again under the test's feet (measured:
    "Directory not empty" when the test moved it back)."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None:
        return
    from farm.settings import Settings

    shared = Settings().cache
    own = shared / "test-workers" / worker
    for name in ("toolchains", "sources/gguf-assembled", "arm64", "cpuid-mask"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        link = own / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(shared / name, target_is_directory=True)
    os.environ["FARM_CACHE"] = str(own)


def pytest_sessionstart(session):
    """In-process resources read the same registry as the tests' farm commands (farm_env): this
    host's class only, unless a test names another.

    The workers share the cores: each toolchain process (torch's intra-op pool, inherited by every
    farm command a test starts) gets its share, not all of them. Two workers on two cores each
    running two spinning threads paid for it (measured 2026-12-07, the two family files with -n 2:
    532 s with torch's default, 477 s with one thread each; no gate result changed)."""
    from farmtest import HOST_ONLY_DEVICES

    os.environ.setdefault("FARM_DEVICES_FILE", str(HOST_ONLY_DEVICES))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """Dummy AWS credentials for the session, and no reading of ~/.aws (moto accepts any keys)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for var in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def s3_server(aws_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 server over HTTP in its own process; yields its endpoint URL."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    for _attempt in range(3):  # the free port can be taken between probe and bind
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            continue
        break
    else:
        pytest.fail(f"moto server did not start; its log:\n{log_path.read_text(errors='replace')}")
    try:
        yield url
    finally:
        stop(proc)


PG_ADMIN_URL = os.environ.get("FARM_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def pg_factory():
    """Makes fresh PostgreSQL databases on the local server (127.0.0.1:5432, trust auth); all are
    dropped at the end of the session."""
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make() -> str:
        name = f"farm_test_{secrets.token_hex(4)}"
        try:
            with admin.connect() as c:
                c.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:  # noqa: BLE001
            if os.environ.get("CI"):
                raise
            pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
        made.append(name)
        return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"

    yield make
    with admin.connect() as c:
        for name in made:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pg_url(pg_factory):
    """One fresh PostgreSQL database for the session."""
    return pg_factory()


@pytest.fixture(scope="session")
def toolchain_python() -> str:
    """The toolchain env `make setup` installed (or FARM_TOOLCHAIN_PYTHON)."""
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    tc = Toolchain(Settings())
    if not tc.is_installed():
        pytest.fail(f"toolchain env not installed at {tc.env_dir}: run `make toolchain`")
    return str(tc.python)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server (not the ephemeral one), so flows in tests start in ~2 s."""
    proc, url, log = start_prefect_server(tmp_path_factory.mktemp("prefect-home"))
    yield url
    stop(proc, timeout=15)
    log.close()


@pytest.fixture(scope="session")
def built(tmp_path_factory, prefect_server, toolchain_python) -> Built:
    home = tmp_path_factory.mktemp("farm-home")
    env = farm_env(home, prefect_server)
    proc = run_farm(["build", "examples/tiny-qwen35.yaml", "--json"], env)
    assert proc.returncode == 0, f"build failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return Built(home, env, json.loads(proc.stdout), proc)


# The heaviest test files, heaviest first (tests/README.md's table): `make test` hands whole files
# to its pytest-xdist workers in collection order (--dist loadfile --no-loadscope-reorder), so these
# start at once, one per worker, and the many short files fill in around them.
HEAVIEST_FIRST = (
    "integration/test_gemma3.py",
    "integration/test_gates_smollm2.py",
    "integration/test_gates.py",
    "integration/test_cpu_classes.py",
    "faults/test_hosts.py",
    "integration/test_families_own_turns.py",
    "integration/test_families_chatml.py",
    "faults/test_concurrent_builds.py",
    "integration/test_build.py",
    "integration/test_rebuild.py",
    "integration/test_cards_build.py",
    "integration/test_revalidate.py",
    "faults/test_kill.py",
    "integration/test_production.py",
    "integration/test_hub_source.py",
)


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(HEAVIEST_FIRST) if path.endswith(name)), len(HEAVIEST_FIRST))

    items.sort(key=rank)  # stable: each file's own order is kept
