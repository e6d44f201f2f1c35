"""Runs Zaqar's own websocket functional tests (`zaqar/tests/functional/websocket/`, from the
installed `zaqar` package) against a server already listening at ws://localhost:9000/, the
port the tests name: `tenax serve --zaqar-websocket-listen 127.0.0.1:9000`, or a real Zaqar.

Zaqar's functional base class would boot a Zaqar (with MongoDB) in the test process; here only
its plain test set-up runs, and the tests talk to whatever listens on the port. Run by
tests/zaqar/upstream/run.sh, in its venv (zaqar==23.0.1, oslotest, pymongo and
websocket-client, which Zaqar's test modules import); the results go to stdout as a subunit
stream, as `python -m subunit.run` writes them.
"""

import os
import sys
import unittest

import zaqar.tests
from subunit.run import SubunitTestRunner

# Zaqar's test set-up reads its configuration files from here.
os.environ.setdefault(
    "ZAQAR_TESTS_CONFIGS_DIR", os.path.join(os.path.dirname(zaqar.tests.__file__), "etc")
)

from zaqar.tests import base as zaqar_base  # noqa: E402 (after the environment is set)
from zaqar.tests.functional import base as functional_base  # noqa: E402


def _set_up_without_a_zaqar(self):
    zaqar_base.TestBase.setUp(self)


functional_base.V2FunctionalTestBase.setUp = _set_up_without_a_zaqar
# The tests skip themselves unless they run "in integration mode", against a live server.
functional_base._TEST_INTEGRATION = True

if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromName("zaqar.tests.functional.websocket")
    if suite.countTestCases() == 0:
        suite = unittest.defaultTestLoader.discover(
            "zaqar.tests.functional.websocket", pattern="test_*.py"
        )
    result = SubunitTestRunner(stream=sys.stdout.buffer).run(suite)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
