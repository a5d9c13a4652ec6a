"""stage failures: a build stopped in a stage, with the tool, its version and its reason

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Issue 18: the family matrix names what fails (stage, tool, version, evidence), not only what passes.
    op.create_table(
        'stage_failures',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('model_id', sa.String(length=200), nullable=False),
        sa.Column('family', sa.String(length=64), nullable=False),
        sa.Column('recipe_name', sa.String(length=200), nullable=True),
        sa.Column('recipe_digest', sa.String(length=64), nullable=True),
        sa.Column('source_id', sa.String(length=64), nullable=True),
        sa.Column('stage', sa.String(length=32), nullable=False),
        sa.Column('tool', sa.String(length=64), nullable=False),
        sa.Column('tool_version', sa.String(length=32), nullable=True),
        sa.Column('toolchain_id', sa.String(length=64), nullable=True),
        sa.Column('error', sa.Text(), nullable=False),
        sa.Column('log_path', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['toolchain_id'], ['toolchains.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('stage_failures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_stage_failures_model_id'), ['model_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_stage_failures_family'), ['family'], unique=False)
        batch_op.create_index(batch_op.f('ix_stage_failures_created_at'), ['created_at'], unique=False)


def downgrade() -> None:
    op.drop_table('stage_failures')
