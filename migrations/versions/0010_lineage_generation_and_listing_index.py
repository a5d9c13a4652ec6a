"""lineage generation counter (what a reader caches against) and the listing's created_at index

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row: bumped by every transaction that changes what a lineage record shows (farm/lineage/db.py),
    # so `farm api` can keep answers until it moves (issue 19: 41 requests/s at 50 clients).
    op.create_table(
        'lineage_generation',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('n', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.execute("INSERT INTO lineage_generation (id, n) VALUES (1, 0)")
    # `/artifacts?limit=20` (newest first) sorted every row: 270 ms at 100k artifacts.
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_artifacts_created_at'), ['created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('artifacts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_artifacts_created_at'))
    op.drop_table('lineage_generation')
