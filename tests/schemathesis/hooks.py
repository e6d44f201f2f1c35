"""Schemathesis hooks for Tenax: keep generated requests from waiting on purpose.

A take may long-poll up to 60 s for a job (`wait`), and a job's read may wait as long for it to
finish (`GET /api/jobs/{id}?wait=`); generated requests would spend the run's time (and its
10 s request timeout) waiting for what no one does, so both are sent with `wait` 0, whichever
phase made them. Everything else is sent as generated.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path == "/api/take" and isinstance(case.body, dict) and "wait" in case.body:
        case.body = {**case.body, "wait": 0}
    if case.operation.path == "/api/jobs/{id}" and case.method.upper() == "GET":
        if isinstance(case.query, dict) and "wait" in case.query:
            case.query = {**case.query, "wait": "0s"}
