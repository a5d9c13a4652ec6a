"""version chains: a model id + variant per farm-built file, unique (chain, chain_seq); model_id

The "previous file" was the newest earlier row with the same file name: two concurrent builds could
both supersede one file (a fork), and an imported file named like a farm-built one superseded it.
Now a farm-built bundle belongs to the chain `<model id>/<variant>` and takes the next sequence
number; the unique index makes a fork impossible. Existing rows: farm-built named bundles get the
chain their name and recipe imply, numbered oldest first; imports leave every chain (and stop
superseding anything).

Revision ID: 0008
Revises: 0007
"""
import re

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def _model_id(name: str) -> str:  # farm.cards.model.model_id, frozen here as of this revision
    mid = re.sub(r"[^a-z0-9._-]", "-", name.lower())
    return mid if re.match(r"^[a-z0-9]", mid) else f"m-{mid}"


def upgrade() -> None:
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('chain', sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column('chain_seq', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('model_id', sa.String(length=200), nullable=True))

    conn = op.get_bind()
    rows = conn.execute(sa.text(
        "SELECT a.sha256, a.name, a.imported, r.name FROM artifacts a LEFT JOIN recipes r ON r.digest = a.recipe_digest "
        "WHERE a.kind = 'litertlm' AND a.name IS NOT NULL ORDER BY a.created_at, a.sha256")).fetchall()
    seq: dict[str, int] = {}
    head: dict[str, str] = {}
    for sha, name, imported, recipe in rows:
        if imported:
            conn.execute(sa.text("UPDATE artifacts SET supersedes_sha256 = NULL WHERE sha256 = :s"), {"s": sha})
            continue
        suffix = f"_{recipe}.litertlm" if recipe else None
        chain = (f"{_model_id(name[: -len(suffix)])}/{recipe}" if suffix and name.endswith(suffix)
                 else f"name/{name}")
        seq[chain] = seq.get(chain, 0) + 1
        conn.execute(sa.text("UPDATE artifacts SET chain = :c, chain_seq = :n, supersedes_sha256 = :p, model_id = :m "
                             "WHERE sha256 = :s"),
                     {"c": chain, "n": seq[chain], "p": head.get(chain), "s": sha,
                      "m": None if chain.startswith("name/") else chain.split("/", 1)[0]})
        head[chain] = sha

    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.create_index('ux_artifacts_chain_seq', ['chain', 'chain_seq'], unique=True)
        batch_op.create_index(batch_op.f('ix_artifacts_model_id'), ['model_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_artifacts_model_id'))
        batch_op.drop_index('ux_artifacts_chain_seq')
        batch_op.drop_column('model_id')
        batch_op.drop_column('chain_seq')
        batch_op.drop_column('chain')
