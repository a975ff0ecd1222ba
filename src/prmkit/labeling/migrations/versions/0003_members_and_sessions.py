"""project members, disabled accounts, idle sessions

Revision ID: 0003
Revises: 0002

Labellers of a database made before projects had members keep the access they had: each
becomes a member of every existing project.
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('project_members',
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('added_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('project_id', 'user_id')
    )
    with op.batch_alter_table('project_members', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_project_members_user_id'), ['user_id'], unique=False)
    # Plain ADD COLUMN, never a copied table: on SQLite, dropping the old users table
    # would cascade to every task.
    op.add_column('users', sa.Column('disabled', sa.Boolean(), server_default=sa.false(),
                                     nullable=False))
    op.add_column('login_sessions', sa.Column('last_seen_at', sa.DateTime(), nullable=True))
    op.execute(
        "INSERT INTO project_members (project_id, user_id, added_at) "
        "SELECT projects.id, users.id, CURRENT_TIMESTAMP FROM projects, users "
        "WHERE users.role = 'labeller'")


def downgrade() -> None:
    op.drop_column('login_sessions', 'last_seen_at')
    op.drop_column('users', 'disabled')
    with op.batch_alter_table('project_members', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_project_members_user_id'))
    op.drop_table('project_members')
