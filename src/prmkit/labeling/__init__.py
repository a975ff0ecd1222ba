"""The step-labelling web app: projects and queues of PRM800K-format solutions, labellers
rating steps as PRM800K's were rated, quality control and export to raw PRM800K JSONL.

    from prmkit.labeling import create_app     # FastAPI app over a database URL
    from prmkit.labeling import service       # the same operations without HTTP
"""

from __future__ import annotations


def create_app(db_url: str, **kwargs):
    from prmkit.labeling.app import create_app as _create

    return _create(db_url, **kwargs)
