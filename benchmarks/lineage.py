"""How long `farm lineage PREFIX` takes as lineage grows: p50/p99 of resolve_sha + lineage() on
seeded databases of realistic shape, and how many statements one lookup issues.

    .venv/bin/python benchmarks/lineage.py [--sizes 10000 100000 1000000] [--db sqlite postgresql]
        [--lookups 300] [--json]

Seeding: per build a float export, a quantized model and a bundle (4 sections each, one shared
tokenizer section per model; every 10th bundle supersedes an earlier one of its name), in bulk
(executemany), so `--sizes` counts artifact rows. PostgreSQL uses a throw-away database on
127.0.0.1:5432 (FARM_TEST_PG_URL's server). Lookups are by a random bundle's 8-digit prefix, each in
its own session, timed with perf_counter. Target (issue: lineage by sha256): p99 <= 20 ms at 100k on
both databases, flat from 100k to 1M.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
import hashlib
import json
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, event, insert, text  # noqa: E402

from farm.lineage.db import Database  # noqa: E402
from farm.lineage.models import Artifact, ArtifactInput, Section, Source, Toolchain  # noqa: E402
from farm.lineage.queries.artifacts import lineage, resolve_sha  # noqa: E402

PG_ADMIN = os.environ.get("FARM_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def h(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def seed(db: Database, n_artifacts: int) -> list[str]:
    now = datetime.now(timezone.utc)
    builds = max(1, n_artifacts // 3)
    with db.session() as s:
        s.execute(insert(Toolchain).values(id=h("tc"), python_version="3.11", packages={}, freeze="", created_at=now))
        s.execute(insert(Source).values(id=h("src"), kind="generated", name="m", family="qwen3_5", repo_id=None,
                                        revision=None, path="/m", spec={}, files=[], tokenizer_sha256=h("tok"),
                                        generation={"eos_token_ids": [2], "from": "generation_config.json"},
                                        created_at=now))
    bundles: list[str] = []
    chunk = 5000
    for start in range(0, builds, chunk):
        arts, inputs, secs = [], [], []
        for b in range(start, min(builds, start + chunk)):
            f, q, z = h("f", b), h("q", b), h("b", b)
            name = f"model{b // 10}_r.litertlm"
            prev = h("b", b - 1) if b % 10 and b > 0 else None
            base = dict(size=1000, source_id=h("src"), toolchain_id=h("tc"), recipe_digest=None, imported=False,
                        created_at=now)
            arts += [dict(sha256=f, kind="float_tflite", uri=f"file:///s/{f}", name=None, details={}, supersedes_sha256=None, **base),
                     dict(sha256=q, kind="quantized_tflite", uri=f"file:///s/{q}", name=None, details={}, supersedes_sha256=None, **base),
                     dict(sha256=z, kind="litertlm", uri=f"file:///s/{z}", name=name, supersedes_sha256=prev,
                          details={"metadata": {"prefill_lengths": [8], "cache_length": 64}}, **base)]
            inputs += [dict(artifact_sha256=q, role="float_model", input_sha256=f),
                       dict(artifact_sha256=z, role="model", input_sha256=q)]
            secs += [dict(artifact_sha256=z, idx=0, type="LlmMetadataProto", offset=16384, size=10, sha256=h("m", b)),
                     dict(artifact_sha256=z, idx=1, type="ExecutorMetadataProto", offset=32768, size=10, sha256=h("e")),
                     dict(artifact_sha256=z, idx=2, type="HF_Tokenizer_Zlib", offset=49152, size=10, sha256=h("t", b // 50)),
                     dict(artifact_sha256=z, idx=3, type="TFLiteModel", offset=65536, size=10, sha256=q)]
            bundles.append(z)
        with db.session() as s:
            # Parents before children: a bundle may supersede one of this very chunk.
            s.execute(insert(Artifact), [a for a in arts if a["supersedes_sha256"] is None])
            s.execute(insert(Artifact), [a for a in arts if a["supersedes_sha256"] is not None])
            s.execute(insert(ArtifactInput), inputs)
            s.execute(insert(Section), secs)
    return bundles


@contextmanager
def throwaway_database(kind: str):
    """A fresh lineage database for one measurement (SQLite in a temp folder, or a PostgreSQL database
    on PG_ADMIN's server), dropped afterwards; yields its Database."""
    if kind == "sqlite":
        db, admin, name = Database(f"sqlite:///{Path(tempfile.mkdtemp(prefix='farm-bench-')) / 'l.db'}"), None, None
    else:
        name = f"farm_bench_{secrets.token_hex(4)}"
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        db = Database(PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}")
    try:
        yield db
    finally:
        db.engine.dispose()
        if admin is not None:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


def seed_and_analyze(db: Database, n: int) -> list[str]:
    bundles = seed(db, n)
    if db.engine.dialect.name == "postgresql":
        with db.engine.connect() as c:
            c.execute(text("ANALYZE"))
            c.commit()
    return bundles


def measure(db: Database, bundles: list[str], lookups: int) -> dict:
    statements = [0]

    @event.listens_for(db.engine, "before_cursor_execute")
    def count(*_a):  # noqa: ANN002
        statements[0] += 1

    rng = random.Random(0)
    times, per_lookup = [], []
    for i in range(lookups):
        prefix = rng.choice(bundles)[:8]
        before = statements[0]
        t0 = time.perf_counter()
        with db.session() as s:
            lineage(s, resolve_sha(s, prefix))
        times.append((time.perf_counter() - t0) * 1000)
        per_lookup.append(statements[0] - before)
    times = times[10:]  # the first lookups warm the caches
    times.sort()
    return {"p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(len(times) * 0.99) - 1], 2),
            "statements_per_lookup": round(statistics.median(per_lookup), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--db", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    ap.add_argument("--lookups", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for kind in args.db:
        for n in args.sizes:
            with throwaway_database(kind) as db:
                t0 = time.monotonic()
                bundles = seed_and_analyze(db, n)
                seeded = time.monotonic() - t0
                row = {"db": kind, "artifacts": len(bundles) * 3, "seed_s": round(seeded, 1),
                       **measure(db, bundles, args.lookups)}
            rows.append(row)
            print(json.dumps(row) if args.json else
                  f"{kind:<10} {row['artifacts']:>9,} artifacts  p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:6.2f} ms  "
                  f"{row['statements_per_lookup']} statements/lookup  (seeded in {row['seed_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
