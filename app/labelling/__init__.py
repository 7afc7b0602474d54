"""Labelling (paper Sec. 3.1): annotators answer (image, class) questions until a panel decides each.

Shared here (used by more than one job): the tables (models), the API bodies (schemas), what labelling hands
out and takes in (types), the vote rules, a label item's state and the lock order (items), the hot statements
(statements), pair subsets, results for the leaderboard and the Prometheus metrics. Each job is a
sub-package: annotating, quality_control, active_sampling, admin (docs/architecture.md).
"""
