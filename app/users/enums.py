"""What an account may do; shared by the models, the API and the command line (which loads no database
for its help)."""

from enum import StrEnum


class Role(StrEnum):
    """What an account may do: admins run competitions, annotators label, workers run jobs."""

    admin = "admin"
    annotator = "annotator"
    worker = "worker"
