"""Schemathesis hooks for Tenax: keep generated requests from waiting on purpose.

A take may long-poll up to 60 s for a job (`wait`); generated takes would spend the run's time
waiting on queues no one fills, so every take is sent with `wait` 0, whichever phase made it.
Everything else is sent as generated.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path == "/api/take" and isinstance(case.body, dict) and "wait" in case.body:
        case.body = {**case.body, "wait": 0}
