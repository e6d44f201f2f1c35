"""A handler's failure: showing it to the ``on_error`` hook, and reporting it to the server
(what the report says, and what each failed attempt to send it means). Each runtime only sends
the report (``Client.fail``) and waits between attempts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ._errors import APIError, InvalidRequest, TenaxConnectionError
from ._models import FailResult, TakenJob
from ._outcomes import describe
from ._worker_common import GONE, Backoff, Counter, PayloadMismatch, UnknownJobType
from ._worker_log import OutcomeLog

ErrorHook = Callable[[TakenJob[Any], BaseException], object]


def call_error_hook(
    hook: ErrorHook | None,
    job: TakenJob[Any],
    error: BaseException,
    log: logging.Logger,
) -> None:
    """Shows a handler's failure to the ``on_error`` hook; the hook's own failure is only
    logged, so that the job's failure is still reported."""
    if hook is None:
        return
    try:
        hook(job, error)
    except Exception:
        log.exception("the on_error hook raised")


class FailureReport:
    """The report of one job's failure: ``message``, ``detail`` and ``options`` for
    ``Client.fail``, from the handler's exception (:func:`tenax._outcomes.describe`: the
    outcome it asks for), sent at most :attr:`ATTEMPTS` times."""

    ATTEMPTS = 5

    def __init__(
        self,
        job: TakenJob[Any],
        error: BaseException,
        counter: Counter,
        log: logging.Logger,
        outcomes: OutcomeLog,
        ran_s: float,
    ) -> None:
        self.job = job
        self.message, self.detail, self.options = describe(error)
        self._counter = counter
        self._log = log
        self._outcomes = outcomes
        # No handler ran for these: a run time would only measure the lookup.
        self._ran_s = None if isinstance(error, (UnknownJobType, PayloadMismatch)) else ran_s
        self._unknown = isinstance(error, UnknownJobType)
        self._backoff = Backoff(first=0.2, cap=2.0)

    def retry_in(self, error: TenaxConnectionError | APIError) -> float | None:
        """After an attempt failed: None to stop (the job is no longer this worker's), else
        the seconds to wait before the next attempt (0: at once)."""
        job = self.job
        if isinstance(error, GONE):
            self._counter.add("lost")
            self._log.warning("job %d: cannot report its failure: %s", job.id, error)
            return None
        if isinstance(error, InvalidRequest):
            # The report itself was refused (a detail the server cannot store, a retry time too
            # far ahead): report the failure plainly, with the reason.
            self._log.error("job %d: failure report refused (%s); sent plainly", job.id, error)
            self.message = f"{self.message} (report refused: {error})"
            self.detail, self.options = None, {}
            return 0.0
        delay = self._backoff.next()
        self._log.warning(
            "job %d: cannot report its failure (%s); again in %.1f s", job.id, error, delay
        )
        return delay

    def reported(self, result: FailResult) -> None:
        """Counts and logs the server's answer: dead, or when the job runs again."""
        self._counter.add("failed")
        self._outcomes.failed(
            self.job,
            self._ran_s,
            self.message,
            result,
            snoozed="snooze" in self.options,
            unknown=self._unknown,
        )

    def gave_up(self) -> None:
        """Every attempt failed."""
        self._log.error("job %d: gave up reporting its failure; its lease will expire", self.job.id)
