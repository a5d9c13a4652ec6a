"""many hosts: lease heartbeats (a lease silent past a bound is broken, whatever the host), and the host that made each artifact and source

Revision ID: 0013
Revises: 0012
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Issue 35: a dead host's lease was broken only after a 6-hour TTL (or when its holder had this
    # host's name and a dead pid). The heartbeat is written with the database's clock, and read
    # against it, so hosts whose clocks disagree judge silence alike. Rows from before have none:
    # their acquired_at stands in.
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True))
    # `farm lineage` names the host of every stage: the host that first made and stored the bytes.
    for table in ('artifacts', 'sources'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('host', sa.String(length=255), nullable=True))


def downgrade() -> None:
    for table in ('artifacts', 'sources'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('host')
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_column('heartbeat_at')
