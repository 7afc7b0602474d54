"""What the tests' HTTP clients of a live service share."""

# not httpx's default 5 s: the tests check what comes back, not how fast; a loaded 2-core CI machine has taken
# longer for a first request (tests/jobs/test_reselection.py's POST /competitions, CI of 2026-11-28)
HTTP_TIMEOUT_S = 60.0
