"""A frozen copy of the storage layer of jitwatch 0.1.0 (commit 378389a, the release before the
backend-neutral core): ``journal``, ``writer``, ``events``, ``config``, ``redact``, with only their
``jitwatch.*`` imports pointed here. It is test data, not code to maintain: the migration tests
build journals with it and run it as an "old worker" beside new ones, so do not reformat or fix it
(it is excluded from ruff and the duplicates report is expected to list it).
"""
