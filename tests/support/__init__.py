"""Helpers shared by the test suite (tests/unit, tests/integration, tests/k8s), e2e/ and bench/.

Import them as ``tests.support.<module>``: pytest runs from the repository root, which
pyproject's ``pythonpath`` puts on ``sys.path``. Each module holds one idea: real broker
processes, waiting for a condition, the official clients, a test OTLP receiver, and so on.
"""
