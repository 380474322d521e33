"""Builders and references shared by the tests (``from tests.helpers.<module> import ...``; pytest puts the
repository root on the path, ``pythonpath`` in pyproject.toml). A helper used by one test file stays in that file;
one used by two or more lives here, once. Fixtures shared by many files are in tests/conftest.py."""
