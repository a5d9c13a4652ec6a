"""cpu classes: every gate and device result names the host and the CPU class its runtime ran on

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Issue 34: the same bytes answer differently on another CPU class (XNNPACK picks kernels from
    # CPUID / hwcaps), so the class is part of what a result measured and of its reuse key. Rows
    # recorded before this migration have no class: they are never reused for one.
    for table in ('gate_results', 'device_results'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('host', sa.String(length=255), nullable=True))
            batch_op.add_column(sa.Column('cpu_class', sa.String(length=255), nullable=True))
            batch_op.add_column(sa.Column('cpu', sa.JSON(), nullable=True))
    with op.batch_alter_table('gate_results', schema=None) as batch_op:
        # What the runtime answered per case (questions, prompts, problems), so replies can be set
        # side by side across classes (a card's pitfall quotes both).
        batch_op.add_column(sa.Column('replies', sa.JSON(), nullable=True))
        batch_op.create_index('ix_gate_results_reuse_class', ['artifact_sha256', 'gate', 'request_digest', 'cpu_class'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('gate_results', schema=None) as batch_op:
        batch_op.drop_index('ix_gate_results_reuse_class')
        batch_op.drop_column('replies')
    for table in ('gate_results', 'device_results'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('cpu')
            batch_op.drop_column('cpu_class')
            batch_op.drop_column('host')
