"""quality measurements (sensitivity sweeps and recipe-search candidates) and tune searches

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'quality_measurements',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('measure_key', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('float_sha256', sa.String(length=64), nullable=False),
        sa.Column('artifact_sha256', sa.String(length=64), nullable=True),
        sa.Column('treatment', sa.String(length=200), nullable=True),
        sa.Column('treatment_digest', sa.String(length=64), nullable=True),
        sa.Column('text_sha256', sa.String(length=64), nullable=False),
        sa.Column('positions', sa.Integer(), nullable=False),
        sa.Column('window', sa.Integer(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('toolchain_id', sa.String(length=64), nullable=True),
        sa.Column('result', sa.JSON(), nullable=False),
        sa.Column('seconds', sa.Double(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['artifact_sha256'], ['artifacts.sha256']),
        sa.ForeignKeyConstraint(['float_sha256'], ['artifacts.sha256']),
        sa.ForeignKeyConstraint(['toolchain_id'], ['toolchains.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('measure_key'),
    )
    with op.batch_alter_table('quality_measurements', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_quality_measurements_artifact_sha256'), ['artifact_sha256'], unique=False)
        batch_op.create_index(batch_op.f('ix_quality_measurements_float_sha256'), ['float_sha256'], unique=False)

    op.create_table(
        'tune_searches',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('model_id', sa.String(length=200), nullable=False),
        sa.Column('config_name', sa.String(length=200), nullable=False),
        sa.Column('float_sha256', sa.String(length=64), nullable=False),
        sa.Column('target', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('recipe_name', sa.String(length=200), nullable=True),
        sa.Column('recipe_digest', sa.String(length=64), nullable=True),
        sa.Column('bundle_sha256', sa.String(length=64), nullable=True),
        sa.Column('candidates', sa.JSON(), nullable=False),
        sa.Column('frontier', sa.JSON(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['bundle_sha256'], ['artifacts.sha256']),
        sa.ForeignKeyConstraint(['float_sha256'], ['artifacts.sha256']),
        sa.ForeignKeyConstraint(['recipe_digest'], ['recipes.digest']),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('tune_searches', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tune_searches_model_id'), ['model_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('tune_searches', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tune_searches_model_id'))
    op.drop_table('tune_searches')
    with op.batch_alter_table('quality_measurements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_quality_measurements_float_sha256'))
        batch_op.drop_index(batch_op.f('ix_quality_measurements_artifact_sha256'))
    op.drop_table('quality_measurements')
