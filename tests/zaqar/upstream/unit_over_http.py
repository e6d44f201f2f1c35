"""Runs some of Zaqar 23.0.1's own unit API tests (`zaqar/tests/unit/transport/wsgi/v2_0/`,
from the installed `zaqar` package) against a server over HTTP, unchanged:

    unit_over_http.py [TEST_NAME ...]

Each name is a module, class or test, as unittest names them (by default the three classes
below). The tests were written for an in-process Zaqar: their base class
(`zaqar/tests/unit/transport/wsgi/base.py`) boots one on MongoDB and hands their requests to its
WSGI app. Here that base class is patched at import time (Zaqar's files are not edited): no
Zaqar is booted, and every request goes to the server at $ZAQAR_UNIT_URL (for example
http://127.0.0.1:PORT), its answer reaching the tests exactly as the WSGI app's would (falcon's
status line in `self.srmock.status`, the headers in `self.srmock.headers`/`headers_dict`, the
body as `[bytes]`, or `[]` when empty).

Pool URIs: the tests build them from `self.mongodb_url` and append `/<name>` (a uuid, `test`,
`test0`..., `zaqar_test_pools_0`...); here it is $TENAX_POOL_BASE_URL, a PostgreSQL server
URL without a database (postgres://user@host:port), so that each pool names a database there.

Run by tests/zaqar/upstream/run.sh, in its venv (zaqar==23.0.1 with its tests, oslotest, ddt,
requests, python-subunit); the results go to stdout as a subunit v2 stream, as
`python -m subunit.run` writes them, with the tests' own ids (run.sh shortens
`zaqar.tests.unit.transport.wsgi.v2_0.` to `unit.`).
"""

import json
import logging
import os
import sys
import types
import unittest
import urllib.parse

# Zaqar decides at import time (when its test helpers are imported, by any test module) whether
# the MongoDB tests run: these classes require MongoDB, whose place the server under test takes.
os.environ["ZAQAR_TEST_MONGODB"] = "1"
# Set, it would rewrite the class's configuration file around a MongoDB URI; nothing here uses one.
os.environ.pop("ZAQAR_TEST_MONGODB_URL", None)
# oslotest's logging fixture then attaches each test's log, at debug (a line per request and
# answer, below), to that test's result beside its traceback, instead of mixing them all on
# stderr.
os.environ.setdefault("OS_LOG_CAPTURE", "1")
os.environ.setdefault("OS_DEBUG", "1")

import zaqar.tests  # noqa: E402 (after the environment is set)

# Zaqar's test set-up reads the classes' configuration files (`config_file`) from here.
os.environ.setdefault(
    "ZAQAR_TESTS_CONFIGS_DIR", os.path.join(os.path.dirname(zaqar.tests.__file__), "etc")
)

import falcon  # noqa: E402
import requests  # noqa: E402
from falcon import testing as ftest  # noqa: E402
from oslo_utils import uuidutils  # noqa: E402
from subunit.run import SubunitTestRunner  # noqa: E402

from zaqar.conf import default  # noqa: E402
from zaqar.conf import drivers_transport_wsgi  # noqa: E402
from zaqar.conf import transport  # noqa: E402
from zaqar.tests.unit.transport.wsgi import base as wsgi_base  # noqa: E402
from zaqar.transport import base as transport_base  # noqa: E402

DEFAULT_TESTS = (
    "zaqar.tests.unit.transport.wsgi.v2_0.test_pools_new.TestPoolsMongoDB",
    "zaqar.tests.unit.transport.wsgi.v2_0.test_flavors_new.TestFlavorsMongoDB",
    "zaqar.tests.unit.transport.wsgi.v2_0.test_messages.TestMessagesMongoDBPooled",
)

# The project Zaqar's base class sends as X-Project-ID when a test names none.
DEFAULT_PROJECT_ID = "518b51ea133c4facadae42c328d6b77b"

# Characters sent as they are in a request's path (RFC 3986's pchar, and `/`); the rest is
# percent-encoded (UTF-8), as a real client sends it. The tests' paths are decoded paths, as
# falcon's `create_environ` takes them (it puts them in PATH_INFO as they are).
PATH_SAFE = "/:@!$&'()*+,;=-._~"

LOG = logging.getLogger("unit_over_http")
# Its lines would repeat ours, without the bodies.
logging.getLogger("urllib3").setLevel(logging.INFO)

# One connection for the whole run. requests' default headers (User-Agent, Accept,
# Accept-Encoding) are dropped: the WSGI environ the tests were written for has none of them.
_session = requests.Session()
_session.headers.clear()


def _server_url():
    url = os.environ.get("ZAQAR_UNIT_URL")
    if not url:
        sys.exit("error: ZAQAR_UNIT_URL (the server under test, http://host:port) is not set")
    return url.rstrip("/")


def _pool_base_url():
    url = os.environ.get("TENAX_POOL_BASE_URL")
    if not url:
        sys.exit("error: TENAX_POOL_BASE_URL (postgres://user@host:port, no database) is not set")
    return url.rstrip("/")


def _send(method, path, headers, query_string="", body=b""):
    """Sends one request to the server under test; returns the `requests` response."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    url = _server_url() + urllib.parse.quote(path, safe=PATH_SAFE)
    if query_string:
        url += "?" + query_string
    # No redirects followed, no retries: the tests see exactly what the server answered.
    response = _session.request(
        method, url, headers=headers, data=body or None, allow_redirects=False, timeout=60
    )
    LOG.debug(
        "%s %s %s -> %s %s",
        method,
        url.removeprefix(_server_url()),
        body[:500],
        response.status_code,
        response.content[:500],
    )
    return response


def set_up(self):
    """Zaqar's set-up (wsgi/base.py), without its bootstrap: the class's configuration is loaded
    (`self.conf.pooling` decides whether the message tests make pools, `self.transport_cfg` gives
    the size limits they test), but no storage, WSGI app or transport is made."""
    super(wsgi_base.TestBase, self).setUp()

    if not self.config_file:
        self.skipTest("No config specified")

    self.conf.register_opts(default.ALL_OPTS)
    self.conf.register_opts(transport.ALL_OPTS, group=transport.GROUP_NAME)
    self.transport_cfg = self.conf[transport.GROUP_NAME]
    self.conf.register_opts(
        drivers_transport_wsgi.ALL_OPTS, group=drivers_transport_wsgi.GROUP_NAME
    )
    self.wsgi_cfg = self.conf[drivers_transport_wsgi.GROUP_NAME]

    self.conf.unreliable = True
    self.conf.admin_mode = True
    # What the tests read of the booted Zaqar: the transport's resource defaults (the default
    # message TTL, 3600 s unless the class's configuration says otherwise).
    self.boot = types.SimpleNamespace(
        transport=types.SimpleNamespace(_defaults=transport_base.ResourceDefaults(self.conf))
    )
    self.app = None
    self.mongodb_url = _pool_base_url()

    self.srmock = ftest.StartResponseMock()

    self.headers = {
        "Client-ID": uuidutils.generate_uuid(),
        "X-ROLES": "admin",
        "X-USER-ID": "a12d157c7d0d41999096639078fd11fc",
        "X-TENANT-ID": "abb69142168841fcaa2785791b92467f",
    }


def _drop_all_over_http(project_ids):
    """Removes every flavor and pool the server lists, as Zaqar's tear-down drops its catalogue
    (`drop_all`), so that one test's leftovers cannot fail the next. Best effort: a server that
    lists or deletes nothing (or fails) leaves things as they are."""
    for project_id in project_ids:
        headers = {
            "Client-ID": uuidutils.generate_uuid(),
            "X-ROLES": "admin",
            "X-Project-ID": project_id,
        }
        for kind, unlink in (("flavors", None), ("pools", {"flavor": ""})):
            seen = set()
            # A listing is one page: list again until nothing new is left (a pool that cannot
            # be deleted stays listed, and is not tried twice).
            for _ in range(100):
                try:
                    response = _send("GET", "/v2/" + kind, headers)
                    names = [item["name"] for item in response.json()[kind]]
                except Exception:
                    break
                names = [name for name in names if name not in seen]
                if not names:
                    break
                for name in names:
                    seen.add(name)
                    path = "/v2/{}/{}".format(kind, name)
                    try:
                        if unlink is not None:
                            _send("PATCH", path, headers, body=json.dumps(unlink))
                        _send("DELETE", path, headers)
                    except Exception:
                        pass


def tear_down(self):
    if self.conf.pooling:
        projects = [DEFAULT_PROJECT_ID]
        if self.headers.get("X-Project-ID", DEFAULT_PROJECT_ID) != DEFAULT_PROJECT_ID:
            projects.append(self.headers["X-Project-ID"])
        _drop_all_over_http(projects)
    super(wsgi_base.TestBase, self).tearDown()


def simulate_request(self, path, project_id=None, **kwargs):
    """Zaqar's `simulate_request`, over HTTP: the same headers (copied from wsgi/base.py), sent
    to the server under test; its answer recorded as falcon's StartResponseMock records the WSGI
    app's, and its body returned as the app's iterable."""
    # Zaqar's header rules: a copy of the given headers (else the test's), X-Project-ID added
    # unless the test says it needs none or gave one.
    headers = kwargs.get("headers", self.headers).copy()
    project_id = DEFAULT_PROJECT_ID if project_id is None else project_id
    if kwargs.get("need_project_id", True):
        headers["X-Project-ID"] = headers.get("X-Project-ID", project_id)
    # A path that cannot be a WSGI PATH_INFO never reaches Zaqar's app: its harness answers 400.
    try:
        path.encode("latin1").decode("utf-8", "replace")
    except UnicodeEncodeError:
        self.srmock.status = falcon.HTTP_400
        return

    response = _send(
        kwargs.get("method", "GET"),
        path,
        headers,
        query_string=kwargs.get("query_string", ""),
        # `create_environ` reads a body of None as an empty one.
        body=kwargs.get("body") or b"",
    )
    header_list = [(name, value) for name, value in response.raw.headers.items()]
    self.srmock(falcon.code_to_http_status(response.status_code), header_list)
    return [response.content] if response.content else []


wsgi_base.TestBase.setUp = set_up
wsgi_base.TestBase.tearDown = tear_down
wsgi_base.TestBase.simulate_request = simulate_request


if __name__ == "__main__":
    _server_url()
    _pool_base_url()
    names = sys.argv[1:] or list(DEFAULT_TESTS)
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = SubunitTestRunner(stream=sys.stdout.buffer).run(suite)
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
