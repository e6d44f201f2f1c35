"""Tenax for Python: a typed client (blocking and asyncio) and a worker runtime.

::

    import tenax

    client = tenax.Client()                      # $TENAX_URL or http://127.0.0.1:7890
    client.enqueue("emails", "email.send", {"to": "ada@example.com"}, delay="5s")

    worker = tenax.Worker("emails", client=client)

    @worker.handler("email.send")
    def send(job: tenax.TakenJob[dict]) -> None:
        ...

    worker.run()
"""

from ._api import UNSET, NewJob, OnDuplicate, Parent, Policy
from ._async_client import AsyncClient, AsyncJobStream
from ._async_worker import AsyncWorker
from ._client import Client, JobStream
from ._cluster import Activity, ActivityCounts, ActivityMinute, Cluster, ServerInfo, WorkerInfo
from ._convert import Duration, Time
from ._errors import (
    APIError,
    Conflict,
    Duplicate,
    InvalidRequest,
    LeaseLost,
    NotDead,
    NotFound,
    NotInFlight,
    PayloadTooLarge,
    RequestTimeout,
    ServerError,
    StorageUnavailable,
    TenaxConnectionError,
    TenaxError,
    TenaxTimeout,
    Unauthorized,
)
from ._models import (
    AttemptPage,
    Batch,
    BatchCounts,
    BatchJobs,
    BatchState,
    CompleteResult,
    Counts,
    Cancellation,
    CancelledJobs,
    CancelResult,
    DeletedJobs,
    DeletedSubscription,
    Delivery,
    DeliveryAttempt,
    DeliveryPage,
    Enqueued,
    FailResult,
    Job,
    JobError,
    JobPage,
    JobStatus,
    LeaseExtended,
    OnParentDead,
    ParentResult,
    PolicyPreview,
    PreviewRow,
    Queue,
    ReplayResult,
    ResultError,
    Skipped,
    Stats,
    Subscription,
    SubscriptionHealth,
    TakenJob,
    Workflow,
    WorkflowJob,
    WorkflowStatus,
)
from ._outcomes import JobOutcome, NotRetryable, Retry, RetryAt, RetryIn, Snooze
from ._transport import default_worker_name
from ._version import __version__
from ._worker import Worker
from ._worker_common import PayloadMismatch, UnknownJobType, WorkerStats

__all__ = [
    "APIError",
    "Activity",
    "ActivityCounts",
    "ActivityMinute",
    "AsyncClient",
    "AsyncJobStream",
    "AsyncWorker",
    "AttemptPage",
    "Batch",
    "BatchCounts",
    "BatchJobs",
    "BatchState",
    "Client",
    "Cluster",
    "CompleteResult",
    "Conflict",
    "Counts",
    "Cancellation",
    "CancelledJobs",
    "CancelResult",
    "DeletedJobs",
    "DeletedSubscription",
    "Delivery",
    "DeliveryAttempt",
    "DeliveryPage",
    "Duplicate",
    "Duration",
    "Enqueued",
    "FailResult",
    "InvalidRequest",
    "Job",
    "JobError",
    "JobOutcome",
    "JobPage",
    "JobStatus",
    "JobStream",
    "LeaseExtended",
    "LeaseLost",
    "NewJob",
    "NotDead",
    "NotFound",
    "NotInFlight",
    "NotRetryable",
    "OnDuplicate",
    "OnParentDead",
    "Parent",
    "ParentResult",
    "PayloadMismatch",
    "PayloadTooLarge",
    "Policy",
    "PolicyPreview",
    "PreviewRow",
    "Queue",
    "ReplayResult",
    "RequestTimeout",
    "ResultError",
    "Retry",
    "RetryAt",
    "RetryIn",
    "ServerError",
    "ServerInfo",
    "Skipped",
    "Snooze",
    "Stats",
    "StorageUnavailable",
    "Subscription",
    "SubscriptionHealth",
    "TakenJob",
    "TenaxConnectionError",
    "TenaxError",
    "TenaxTimeout",
    "Time",
    "UNSET",
    "Unauthorized",
    "UnknownJobType",
    "Worker",
    "WorkerInfo",
    "WorkerStats",
    "Workflow",
    "WorkflowJob",
    "WorkflowStatus",
    "__version__",
    "default_worker_name",
]
