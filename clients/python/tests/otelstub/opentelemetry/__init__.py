"""A stand-in for the part of the opentelemetry-api and -sdk packages that
tenure and tests/otel_scenario.py use, with their names and behaviour, so
that CI (which cannot install them: Debian has no package of them) runs
the scenario. test_otel.py runs it against the real packages too where
they are installed (TENURE_OTEL_PYTHONPATH)."""
