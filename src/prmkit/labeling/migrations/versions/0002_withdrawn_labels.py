"""withdrawn labels (undo of a labeller's last rating)

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('withdrawn_labels',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('ratings', sa.JSON(), nullable=False),
    sa.Column('flags', sa.JSON(), nullable=False),
    sa.Column('human_text', sa.Text(), nullable=True),
    sa.Column('submission_id', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('withdrawn_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('submission_id')
    )
    with op.batch_alter_table('withdrawn_labels', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_withdrawn_labels_task_id'), ['task_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('withdrawn_labels', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_withdrawn_labels_task_id'))
    op.drop_table('withdrawn_labels')
