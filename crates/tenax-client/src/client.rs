//! [`Client`]: one method per endpoint of the native API.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::batch::{AddJobs, Batch as BatchView, BatchJobs, BatchList, NewBatch};
use crate::cluster::{Activity, Cluster};
use crate::error::{Error, Result, chain};
use crate::model::{
    AttemptList, AttemptPage, CancelResult, CancelledJobs, CompleteResult, CompleteResults,
    CreatedToken, DeletedJobs, DeletedSubscription, Delivery, DeliveryAttempt, DeliveryPage,
    Enqueued, FailResult, JobInfo, JobList, JobPage, Lease, LeaseExtended, MovedQueues,
    PolicyPreview, Queue, QueueList, ReplayResult, Replayed, Stats, Subscription, SubscriptionList,
    TakenJob, TokenInfo, TokenList,
};
use crate::request::{
    Batch, CancelSelection, DeadSelection, DeliveryFilter, FailBody, Failure, JobFilter, NewJob,
    NewToken, OnDuplicate, QueueUpdate, ReplayDead, ReplayDeliveries, RotateSecret,
    SubscriptionSettings, Take,
};
use crate::schedule::{NewSchedule, Schedule, ScheduleList, SchedulePreview, Ticks};
use crate::stream::JobStream;
use crate::time::duration_ms;

/// The default base URL, as `tenax serve` listens by default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7890";

/// A client of one Tenax server: cheap to clone (clones share one connection pool), safe to
/// use from many tasks.
///
/// ```no_run
/// # async fn example() -> Result<(), tenax_client::Error> {
/// use tenax_client::{Client, NewJob};
///
/// let client = Client::builder()
///     .url("https://queue.internal:7890")
///     .token("tnx_…")
///     .ca_file("/etc/tenax/ca.pem")
///     .build()?;
/// let job = client.enqueue(&NewJob::new("emails", "email.send").payload(serde_json::json!({"to": "ada@example.com"}))).await?;
/// println!("job {} is {:?}", job.id, job.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Arc<str>,
    /// How long a request may take (a long poll adds its wait).
    timeout: Duration,
    /// The worker name sent as `X-Tenax-Worker` with every request ([`Client::with_worker`]).
    worker: Option<HeaderValue>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.base)
            .field("timeout", &self.timeout)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

/// The header that names a worker to the server (`GET /api/cluster` lists it by that name).
pub const WORKER_HEADER: &str = "x-tenax-worker";

/// How a [`Client`] reaches its server.
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    token: Option<String>,
    ca_files: Vec<PathBuf>,
    ca_pems: Vec<Vec<u8>>,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: String,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("ca_files", &self.ca_files)
            .field("ca_pems", &self.ca_pems.len())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_owned(),
            token: None,
            ca_files: Vec::new(),
            ca_pems: Vec::new(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            user_agent: concat!("tenax-client/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

impl ClientBuilder {
    /// The server's base URL, `http://` or `https://` (default `http://127.0.0.1:7890`). A
    /// path is kept as a prefix (a server behind a proxy at `/tenax`).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// The API token (`tnx_…`), sent as `Authorization: Bearer <token>`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A PEM file of CA certificates to trust besides the platform's (a server whose
    /// certificate a private CA signed). Read by [`ClientBuilder::build`].
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// CA certificates (PEM text) to trust besides the platform's.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pems.push(pem.into());
        self
    }

    /// How long a request may take, from connecting to the end of the answer (default 30 s).
    /// A long-polling take adds its `wait`; a job stream is bounded by its idle timeout
    /// instead, once its answer has begun within this time.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting (TCP and TLS) may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The `User-Agent` header (default `tenax-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Checks the settings, reads the CA files and builds the client.
    pub fn build(self) -> Result<Client> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| Error::Config(format!("url: {e}: {:?}", self.url)))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(Error::Config(format!(
                "url: must be http://host[:port] or https://host[:port], got {:?}",
                self.url
            )));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::Config(format!(
                "url: must not have a query or fragment, got {:?}",
                self.url
            )));
        }
        let mut headers = HeaderMap::new();
        if let Some(token) = &self.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Config("token: must be printable ASCII".to_owned()))?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
        }
        let mut certificates = Vec::new();
        for path in &self.ca_files {
            let pem = std::fs::read(path).map_err(|e| {
                Error::Config(format!("ca_file: cannot read {}: {e}", path.display()))
            })?;
            certificates.extend(certificates_of(&pem, &path.display().to_string())?);
        }
        for pem in &self.ca_pems {
            certificates.extend(certificates_of(pem, "ca_pem")?);
        }
        let make = || {
            crate::tls::client_builder()
                .default_headers(headers.clone())
                .user_agent(self.user_agent.clone())
                .connect_timeout(self.connect_timeout)
        };
        let http = match make().tls_certs_merge(certificates.clone()).build() {
            Ok(http) => http,
            // No platform root certificates (a minimal container): trust only the given CAs,
            // so that plain http, and https with a CA file, keep working.
            Err(error) => match make().tls_certs_only(certificates).build() {
                Ok(http) => {
                    tracing::debug!(
                        error = chain(&error),
                        "no platform root certificates: trusting only the given CAs"
                    );
                    http
                }
                Err(_) => return Err(Error::Config(format!("the HTTP client: {}", chain(&error)))),
            },
        };
        Ok(Client {
            http,
            base: Arc::from(url.as_str().trim_end_matches('/')),
            timeout: self.timeout,
            worker: None,
        })
    }
}

fn certificates_of(pem: &[u8], what: &str) -> Result<Vec<reqwest::Certificate>> {
    let certificates = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| Error::Config(format!("ca: {what} is not PEM certificates: {e}")))?;
    if certificates.is_empty() {
        return Err(Error::Config(format!("ca: {what} holds no certificate")));
    }
    Ok(certificates)
}

impl Client {
    /// Settings for a client; [`ClientBuilder::build`] makes it.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client of the server at `url`, without a token.
    pub fn new(url: impl Into<String>) -> Result<Self> {
        Self::builder().url(url).build()
    }

    /// A client configured as the `tenax` commands are: `TENAX_URL` (default
    /// `http://127.0.0.1:7890`), `TENAX_TOKEN`, `TENAX_CA_FILE`.
    pub fn from_env() -> Result<Self> {
        let mut builder = Self::builder();
        if let Ok(url) = std::env::var("TENAX_URL") {
            builder = builder.url(url);
        }
        if let Ok(token) = std::env::var("TENAX_TOKEN") {
            builder = builder.token(token);
        }
        if let Some(path) = std::env::var_os("TENAX_CA_FILE") {
            builder = builder.ca_file(path);
        }
        builder.build()
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// This client, sending `name` as `X-Tenax-Worker` with every request, so that the server
    /// lists its takes, streams and heartbeats under that name (`GET /api/cluster`; without
    /// one, it is known by its address and User-Agent). A [`Worker`](crate::Worker) does this
    /// with its [`name`](crate::WorkerBuilder::name). `name`: 1 to 128 visible ASCII characters
    /// or spaces.
    pub fn with_worker(&self, name: &str) -> Result<Client> {
        let chars = name.chars().count();
        let value = HeaderValue::from_str(name)
            .ok()
            .filter(|_| (1..=128).contains(&chars))
            .ok_or_else(|| {
                Error::Config(format!(
                    "worker name: must be 1 to 128 visible ASCII characters or spaces, got {name:?}"
                ))
            })?;
        Ok(Client {
            worker: Some(value),
            ..self.clone()
        })
    }

    /// The worker name this client sends, if any ([`Client::with_worker`]).
    pub fn worker(&self) -> Option<&str> {
        self.worker.as_ref().and_then(|v| v.to_str().ok())
    }

    // --- plumbing ---------------------------------------------------------------------------

    fn request(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::RequestBuilder> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .map_err(|e| Error::Config(format!("url: {e}")))?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in query {
                pairs.append_pair(name, value);
            }
        }
        let request = self.http.request(method, url);
        Ok(match &self.worker {
            Some(name) => request.header(WORKER_HEADER, name.clone()),
            None => request,
        })
    }

    fn with_body(
        request: reqwest::RequestBuilder,
        body: &(impl Serialize + ?Sized),
    ) -> Result<reqwest::RequestBuilder> {
        let bytes = serde_json::to_vec(body).map_err(Error::Encode)?;
        Ok(request
            .header(header::CONTENT_TYPE, "application/json")
            .body(bytes))
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<(StatusCode, Option<String>, bytes::Bytes)> {
        let response = request
            .timeout(timeout)
            .send()
            .await
            .map_err(Error::Transport)?;
        let status = response.status();
        let request_id = request_id_of(response.headers());
        let bytes = response.bytes().await.map_err(Error::Transport)?;
        if !status.is_success() {
            return Err(error_answer(status, request_id, &bytes));
        }
        Ok((status, request_id, bytes))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T> {
        self.call_with_timeout(method, path, query, body, self.timeout)
            .await
    }

    async fn call_with_timeout<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&(impl Serialize + ?Sized)>,
        timeout: Duration,
    ) -> Result<T> {
        let mut request = self.request(method, path, query)?;
        if let Some(body) = body {
            request = Self::with_body(request, body)?;
        }
        let (status, request_id, bytes) = self.send(request, timeout).await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::UnexpectedAnswer {
            status: status.as_u16(),
            message: format!("{e}: {}", snippet(&bytes)),
            request_id,
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str, query: &[(&str, String)]) -> Result<T> {
        self.call(Method::GET, path, query, None::<&()>).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T> {
        self.call(Method::POST, path, &[], Some(body)).await
    }

    /// A POST without a body (pause, resume, enable, disable).
    async fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call(Method::POST, path, &[], None::<&()>).await
    }

    /// A request whose success has no body (`204`).
    async fn call_no_content(&self, method: Method, path: &str) -> Result<()> {
        let request = self.request(method, path, &[])?;
        self.send(request, self.timeout).await.map(|_| ())
    }

    // --- health -----------------------------------------------------------------------------

    /// `GET /healthz`: Ok when the server is up.
    pub async fn health(&self) -> Result<()> {
        self.call_no_content(Method::GET, "/healthz").await
    }

    // --- administration ---------------------------------------------------------------------

    /// `POST /api/admin/backup`: a backup of the server's embedded store, a tar archive of
    /// `tenax.redb` and `backup.json`, read in chunks ([`Backup::chunk`]). The server writes
    /// the copy before it answers, so the answer may take as long as the copy: no timeout
    /// bounds it. An unscoped admin token only; a server on PostgreSQL answers 409.
    pub async fn backup(&self) -> Result<Backup> {
        let response = self
            .request(Method::POST, "/api/admin/backup", &[])?
            .send()
            .await
            .map_err(Error::Transport)?;
        let status = response.status();
        if !status.is_success() {
            let request_id = request_id_of(response.headers());
            let bytes = response.bytes().await.map_err(Error::Transport)?;
            return Err(error_answer(status, request_id, &bytes));
        }
        Ok(Backup { response })
    }

    // --- enqueue ----------------------------------------------------------------------------

    /// Enqueues one job (`POST /api/jobs`). `created` is false when `on_duplicate: existing`
    /// found the job holding its unique key.
    pub async fn enqueue<P: Serialize>(&self, job: &NewJob<P>) -> Result<Enqueued> {
        self.post("/api/jobs", job).await
    }

    /// Enqueues many jobs atomically (`POST /api/jobs/batch`): one bad job refuses them all
    /// (the error's field is `jobs[i]. ...`). Answers in request order.
    pub async fn enqueue_many<P: Serialize>(&self, jobs: &[NewJob<P>]) -> Result<Vec<Enqueued>> {
        self.enqueue_batch(jobs, None).await
    }

    /// [`Client::enqueue_many`] with what every job of the batch does on a duplicate key.
    pub async fn enqueue_many_with<P: Serialize>(
        &self,
        jobs: &[NewJob<P>],
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>> {
        self.enqueue_batch(jobs, Some(on_duplicate)).await
    }

    /// Enqueues jobs already written as JSON objects in the shape of `POST /api/jobs` (the
    /// lines of an NDJSON file, say), atomically as [`Client::enqueue_many`] does: the server
    /// checks every field, and one bad job refuses them all (the error's field is
    /// `jobs[i]. ...`).
    pub async fn enqueue_many_json(&self, jobs: &[Box<RawValue>]) -> Result<Vec<Enqueued>> {
        self.enqueue_batch(jobs, None).await
    }

    async fn enqueue_batch<J: Serialize>(
        &self,
        jobs: &[J],
        on_duplicate: Option<OnDuplicate>,
    ) -> Result<Vec<Enqueued>> {
        let answer: JobList<Enqueued> = self
            .post("/api/jobs/batch", &Batch { jobs, on_duplicate })
            .await?;
        Ok(answer.jobs)
    }

    // --- inspect ----------------------------------------------------------------------------

    /// One job with its status and error history.
    pub async fn get_job(&self, id: u64) -> Result<JobInfo> {
        self.get(&format!("/api/jobs/{id}"), &[]).await
    }

    /// The workflow job `id` belongs to: every job joined to it by `after`, either way, with
    /// its state, and the edges (`GET /api/workflows/{id}`).
    pub async fn workflow(&self, id: u64) -> Result<crate::model::Workflow> {
        self.get(&format!("/api/workflows/{id}"), &[]).await
    }

    /// A job once it has finished (completed or dead), or as it is after `wait` (at most 60 s),
    /// whichever comes first (`GET /api/jobs/{id}?wait=`): how a producer waits for a job's
    /// result without polling. Check [`JobInfo::status`]: an unfinished job means the wait
    /// ran out.
    pub async fn wait_for_job(&self, id: u64, wait: Duration) -> Result<JobInfo> {
        let query = [("wait", duration_ms(wait).to_string())];
        // The server holds the request up to `wait`: the timeout is on top of it.
        let timeout = self.timeout + wait;
        let path = format!("/api/jobs/{id}");
        self.call_with_timeout(Method::GET, &path, &query, None::<&()>, timeout)
            .await
    }

    /// A page of jobs in id order.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<JobPage> {
        self.get("/api/jobs", &filter.pairs()).await
    }

    /// Every job the filter selects, page after page.
    pub fn all_jobs(&self, filter: JobFilter) -> impl Stream<Item = Result<JobInfo>> + '_ {
        self.pages("/api/jobs", filter)
    }

    fn pages(
        &self,
        path: &'static str,
        filter: JobFilter,
    ) -> impl Stream<Item = Result<JobInfo>> + '_ {
        use futures_util::StreamExt as _;
        let first = filter.clone();
        futures_util::stream::try_unfold(Some(first), move |next| {
            let filter = filter.clone();
            async move {
                let Some(page_filter) = next else {
                    return Ok(None);
                };
                let page: JobPage = self.get(path, &page_filter.pairs()).await?;
                let following = page.next_after.map(|after| filter.with_after(Some(after)));
                Ok(Some((page.jobs, following)))
            }
        })
        .map(|page| match page {
            Ok(jobs) => futures_util::stream::iter(jobs.into_iter().map(Ok)).left_stream(),
            Err(error) => futures_util::stream::once(async { Err(error) }).right_stream(),
        })
        .flatten()
    }

    /// Removes a job in any status.
    pub async fn delete_job(&self, id: u64) -> Result<()> {
        self.call_no_content(Method::DELETE, &format!("/api/jobs/{id}"))
            .await
    }

    /// Cancels a job: at once if it is scheduled or ready; if it is in flight, its lease is
    /// marked and its worker learns it on its next heartbeat. A finished job is refused
    /// ([`Error::Api`] with status 409).
    pub async fn cancel_job(&self, id: u64) -> Result<CancelResult> {
        self.post(&format!("/api/jobs/{id}/cancel"), &serde_json::json!({}))
            .await
    }

    /// Cancels the unfinished jobs of a selection (see [`Client::cancel_job`]).
    pub async fn cancel_jobs(&self, selection: &CancelSelection) -> Result<CancelledJobs> {
        self.post("/api/jobs/cancel", selection).await
    }

    /// Job counts per queue and status.
    pub async fn stats(&self) -> Result<Stats> {
        self.get("/api/stats", &[]).await
    }

    // --- work -------------------------------------------------------------------------------

    /// Leases up to `max` ready jobs (`POST /api/take`), waiting up to `wait` for the first.
    pub async fn take(&self, take: &Take) -> Result<Vec<TakenJob>> {
        let timeout = self.timeout + take.wait_duration();
        let answer: JobList<TakenJob> = self
            .call_with_timeout(Method::POST, "/api/take", &[], Some(take), timeout)
            .await?;
        Ok(answer.jobs)
    }

    /// Opens a job stream (`POST /api/take/stream`): jobs pushed as they become ready, never
    /// more than `max` leased to it at once (acknowledge some to get more). Keep-alive lines
    /// are skipped. Dropping the stream closes the connection, and the server puts the jobs
    /// it still holds back to ready without using an attempt.
    pub async fn stream(&self, take: &Take) -> Result<JobStream> {
        let request = Self::with_body(self.request(Method::POST, "/api/take/stream", &[])?, take)?;
        // No request timeout: the answer lasts as long as the stream. Its start is bounded
        // here, and its silence by the stream's idle timeout.
        let response = tokio::time::timeout(self.timeout, request.send())
            .await
            .map_err(|_| Error::StreamStalled(self.timeout))?
            .map_err(Error::Transport)?;
        let status = response.status();
        if !status.is_success() {
            let request_id = request_id_of(response.headers());
            let bytes = tokio::time::timeout(self.timeout, response.bytes())
                .await
                .map_err(|_| Error::StreamStalled(self.timeout))?
                .map_err(Error::Transport)?;
            return Err(error_answer(status, request_id, &bytes));
        }
        Ok(JobStream::new(response))
    }

    /// Extends a job's lease to `lease` from now (`None`: the server's default lease).
    pub async fn heartbeat(
        &self,
        job: impl Into<Lease>,
        lease: Option<Duration>,
    ) -> Result<LeaseExtended> {
        #[derive(Serialize)]
        struct Body {
            lease_token: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            lease: Option<u64>,
        }
        let job = job.into();
        let body = Body {
            lease_token: job.lease_token,
            lease: lease.map(duration_ms),
        };
        self.post(&format!("/api/jobs/{}/heartbeat", job.id), &body)
            .await
    }

    /// Completes a job.
    pub async fn complete(&self, job: impl Into<Lease>) -> Result<()> {
        #[derive(Serialize)]
        struct Body {
            lease_token: u64,
        }
        let job = job.into();
        let _: Value = self
            .post(
                &format!("/api/jobs/{}/complete", job.id),
                &Body {
                    lease_token: job.lease_token,
                },
            )
            .await?;
        Ok(())
    }

    /// Completes a job with its result: any JSON (at most the server's payload limit), kept
    /// with the completed job for its retention and shown by [`Client::get_job`]
    /// ([`JobInfo::result`]).
    pub async fn complete_with_result(
        &self,
        job: impl Into<Lease>,
        result: &(impl Serialize + ?Sized),
    ) -> Result<()> {
        #[derive(Serialize)]
        struct Body<'a, R: ?Sized> {
            lease_token: u64,
            result: &'a R,
        }
        let job = job.into();
        let _: Value = self
            .post(
                &format!("/api/jobs/{}/complete", job.id),
                &Body {
                    lease_token: job.lease_token,
                    result,
                },
            )
            .await?;
        Ok(())
    }

    /// Completes many jobs in one durable commit, each with its result if it has one (at most
    /// 10 000). A result over the server's payload limit refuses the whole request.
    pub async fn complete_many_with_results(
        &self,
        jobs: &[(Lease, Option<&RawValue>)],
    ) -> Result<Vec<CompleteResult>> {
        #[derive(Serialize)]
        struct Item<'a> {
            id: u64,
            lease_token: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            result: Option<&'a RawValue>,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            jobs: Vec<Item<'a>>,
        }
        let jobs = jobs
            .iter()
            .map(|(lease, result)| Item {
                id: lease.id,
                lease_token: lease.lease_token,
                result: *result,
            })
            .collect();
        let answer: CompleteResults = self.post("/api/jobs/complete", &Body { jobs }).await?;
        Ok(answer.results)
    }

    /// Completes many jobs in one durable commit (`POST /api/jobs/complete`, at most 10 000);
    /// each gets its own result.
    pub async fn complete_many(&self, jobs: &[Lease]) -> Result<Vec<CompleteResult>> {
        #[derive(Serialize)]
        struct Body<'a> {
            jobs: &'a [Lease],
        }
        let answer: CompleteResults = self.post("/api/jobs/complete", &Body { jobs }).await?;
        Ok(answer.results)
    }

    /// Reports a failure; the answer is the policy's decision.
    pub async fn fail(&self, job: impl Into<Lease>, failure: &Failure) -> Result<FailResult> {
        let job = job.into();
        let body = FailBody {
            lease_token: job.lease_token,
            failure,
        };
        self.post(&format!("/api/jobs/{}/fail", job.id), &body)
            .await
    }

    // --- dead jobs --------------------------------------------------------------------------

    /// A page of dead jobs (the filter's status is ignored).
    pub async fn list_dead(&self, filter: &JobFilter) -> Result<JobPage> {
        self.get("/api/dead", &filter.pairs()).await
    }

    /// Every dead job the filter selects, page after page.
    pub fn all_dead(&self, filter: JobFilter) -> impl Stream<Item = Result<JobInfo>> + '_ {
        self.pages("/api/dead", filter)
    }

    /// Replays dead jobs: they are ready at once; the answer says which were skipped and why.
    pub async fn replay_dead(&self, replay: &ReplayDead) -> Result<ReplayResult> {
        self.post("/api/dead/replay", replay).await
    }

    /// Deletes dead jobs.
    pub async fn delete_dead(&self, selection: &DeadSelection) -> Result<DeletedJobs> {
        self.post("/api/dead/delete", selection).await
    }

    // --- queues -----------------------------------------------------------------------------

    /// Every queue with settings or jobs.
    pub async fn list_queues(&self) -> Result<Vec<Queue>> {
        let answer: QueueList = self.get("/api/queues", &[]).await?;
        Ok(answer.queues)
    }

    pub async fn get_queue(&self, name: &str) -> Result<Queue> {
        self.get(&format!("/api/queues/{}", segment(name)), &[])
            .await
    }

    /// Changes the settings the update names. A queue that has never existed is refused (404,
    /// naming the closest ones) unless the update says [`QueueUpdate::create`].
    pub async fn update_queue(&self, name: &str, update: &QueueUpdate) -> Result<Queue> {
        let query: Vec<(&str, String)> = if update.creates() {
            vec![("create", "true".to_owned())]
        } else {
            Vec::new()
        };
        self.call(
            Method::PUT,
            &format!("/api/queues/{}", segment(name)),
            &query,
            Some(update),
        )
        .await
    }

    /// A paused queue accepts jobs but hands none out. A queue that has never existed is
    /// refused (404); to set one up paused, `update_queue` with `paused(true)` and
    /// [`QueueUpdate::create`].
    pub async fn pause_queue(&self, name: &str) -> Result<Queue> {
        self.post_empty(&format!("/api/queues/{}/pause", segment(name)))
            .await
    }

    pub async fn resume_queue(&self, name: &str) -> Result<Queue> {
        self.post_empty(&format!("/api/queues/{}/resume", segment(name)))
            .await
    }

    /// Moves queue `name`, and the queues `with` it, to pool `to` with all they hold
    /// (`POST /api/queues/{name}/move`; an unscoped admin token). Their writes are refused
    /// (503) while they move. A move that stopped short (an [`Error`] here) is finished by
    /// asking for it again.
    pub async fn move_queue(&self, name: &str, to: &str, with: &[String]) -> Result<MovedQueues> {
        #[derive(Serialize)]
        struct Move<'a> {
            to: &'a str,
            with: &'a [String],
        }
        self.post(
            &format!("/api/queues/{}/move", segment(name)),
            &Move { to, with },
        )
        .await
    }

    // --- batches ----------------------------------------------------------------------------

    /// Makes a batch and its first jobs in one commit (`POST /api/batches`): closed as it is
    /// made unless [`NewBatch::open`]. A bad job refuses it all (the error's field is
    /// `jobs[i]. ...`, or `on_complete. ...`).
    pub async fn create_batch<P: Serialize>(&self, batch: &NewBatch<P>) -> Result<BatchJobs> {
        self.post("/api/batches", batch).await
    }

    /// Adds jobs to an open batch (`POST /api/batches/{id}/jobs`), closing it in the same
    /// commit when `close`. A closed batch refuses them: [`Error::Api`] with code `batch_closed`.
    pub async fn add_to_batch<P: Serialize>(
        &self,
        id: u64,
        jobs: &[NewJob<P>],
        close: bool,
    ) -> Result<BatchJobs> {
        self.post(&format!("/api/batches/{id}/jobs"), &AddJobs { jobs, close })
            .await
    }

    /// Closes a batch: it finishes (its callbacks enqueued) once its pending jobs have, at once
    /// if none is pending.
    pub async fn close_batch(&self, id: u64) -> Result<BatchView> {
        self.post_empty(&format!("/api/batches/{id}/close")).await
    }

    pub async fn get_batch(&self, id: u64) -> Result<BatchView> {
        self.get(&format!("/api/batches/{id}"), &[]).await
    }

    /// A page of batches in id order, after `after` (with a scoped token: those whose every
    /// queue it may touch).
    pub async fn list_batches(
        &self,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> Result<Vec<BatchView>> {
        let mut query = Vec::new();
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        let answer: BatchList = self.get("/api/batches", &query).await?;
        Ok(answer.batches)
    }

    /// Forgets a batch; its jobs stay. An unfinished batch deleted never fires.
    pub async fn delete_batch(&self, id: u64) -> Result<()> {
        let _: Value = self
            .call(
                Method::DELETE,
                &format!("/api/batches/{id}"),
                &[],
                None::<&()>,
            )
            .await?;
        Ok(())
    }

    // --- schedules --------------------------------------------------------------------------

    /// Makes a schedule, or replaces the one of this name. A replaced schedule keeps what its
    /// ticks did; when its expression or time zone changes, its ticks start after the change.
    pub async fn put_schedule<P: Serialize>(
        &self,
        name: &str,
        schedule: &NewSchedule<P>,
    ) -> Result<Schedule> {
        self.call(
            Method::PUT,
            &format!("/api/schedules/{}", segment(name)),
            &[],
            Some(schedule),
        )
        .await
    }

    /// Every schedule, by name (with a scoped token: those whose job goes to its queues).
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>> {
        let answer: ScheduleList = self.get("/api/schedules", &[]).await?;
        Ok(answer.schedules)
    }

    pub async fn get_schedule(&self, name: &str) -> Result<Schedule> {
        self.get(&format!("/api/schedules/{}", segment(name)), &[])
            .await
    }

    /// Deletes a schedule; the jobs it made stay.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        let _: Value = self
            .call(
                Method::DELETE,
                &format!("/api/schedules/{}", segment(name)),
                &[],
                None::<&()>,
            )
            .await?;
        Ok(())
    }

    /// A paused schedule's ticks enqueue nothing until it is resumed.
    pub async fn pause_schedule(&self, name: &str) -> Result<Schedule> {
        self.post_empty(&format!("/api/schedules/{}/pause", segment(name)))
            .await
    }

    /// Resumes a paused schedule from its next tick after now: ticks while it was paused are
    /// not enqueued.
    pub async fn resume_schedule(&self, name: &str) -> Result<Schedule> {
        self.post_empty(&format!("/api/schedules/{}/resume", segment(name)))
            .await
    }

    /// Runs a schedule now: its job is enqueued at once, outside the timetable, and recorded
    /// as its last job (so `overlap: skip` waits for it); its ticks are unchanged.
    pub async fn run_schedule(&self, name: &str) -> Result<Schedule> {
        self.post_empty(&format!("/api/schedules/{}/run", segment(name)))
            .await
    }

    /// A schedule's next `count` ticks (server default 10, at most 1000).
    pub async fn schedule_ticks(&self, name: &str, count: Option<u32>) -> Result<Ticks> {
        let query: Vec<(&str, String)> = count
            .map(|n| ("count", n.to_string()))
            .into_iter()
            .collect();
        self.get(&format!("/api/schedules/{}/ticks", segment(name)), &query)
            .await
    }

    /// The next ticks of any expression, nothing stored: check it before trusting it.
    pub async fn preview_schedule(&self, preview: &SchedulePreview) -> Result<Ticks> {
        self.post("/api/schedules/preview", preview).await
    }

    // --- policies ---------------------------------------------------------------------------

    /// A policy's first `rows` retries (server default 100, at most 10 000) and its totals.
    pub async fn preview_policy(&self, policy: &Value, rows: Option<u32>) -> Result<PolicyPreview> {
        let query: Vec<(&str, String)> =
            rows.map(|r| ("rows", r.to_string())).into_iter().collect();
        self.call(Method::POST, "/api/policy/preview", &query, Some(policy))
            .await
    }

    // --- subscriptions ----------------------------------------------------------------------

    /// Subscribes an endpoint to a queue. The answer is the only one that shows the secret.
    pub async fn create_subscription(
        &self,
        queue: &str,
        settings: &SubscriptionSettings,
    ) -> Result<Subscription> {
        self.post(
            &format!("/api/queues/{}/subscriptions", segment(queue)),
            settings,
        )
        .await
    }

    /// Every subscription, in id order.
    pub async fn list_subscriptions(&self) -> Result<Vec<Subscription>> {
        let answer: SubscriptionList = self.get("/api/subscriptions", &[]).await?;
        Ok(answer.subscriptions)
    }

    /// The subscriptions of one queue.
    pub async fn list_queue_subscriptions(&self, queue: &str) -> Result<Vec<Subscription>> {
        let answer: SubscriptionList = self
            .get(
                &format!("/api/queues/{}/subscriptions", segment(queue)),
                &[],
            )
            .await?;
        Ok(answer.subscriptions)
    }

    pub async fn get_subscription(&self, id: u64) -> Result<Subscription> {
        self.get(&format!("/api/subscriptions/{id}"), &[]).await
    }

    /// Changes the fields the settings name.
    pub async fn update_subscription(
        &self,
        id: u64,
        changes: &SubscriptionSettings,
    ) -> Result<Subscription> {
        self.call(
            Method::PATCH,
            &format!("/api/subscriptions/{id}"),
            &[],
            Some(changes),
        )
        .await
    }

    pub async fn enable_subscription(&self, id: u64) -> Result<Subscription> {
        self.post_empty(&format!("/api/subscriptions/{id}/enable"))
            .await
    }

    /// A disabled subscription's deliveries wait.
    pub async fn disable_subscription(&self, id: u64) -> Result<Subscription> {
        self.post_empty(&format!("/api/subscriptions/{id}/disable"))
            .await
    }

    /// Deletes a subscription and its deliveries.
    pub async fn delete_subscription(&self, id: u64) -> Result<DeletedSubscription> {
        self.call(
            Method::DELETE,
            &format!("/api/subscriptions/{id}"),
            &[],
            None::<&()>,
        )
        .await
    }

    /// A new signing secret; the old one still signs beside it for the overlap. The answer
    /// is the only one that shows the new secret.
    pub async fn rotate_subscription_secret(
        &self,
        id: u64,
        rotation: &RotateSecret,
    ) -> Result<Subscription> {
        self.post(&format!("/api/subscriptions/{id}/rotate-secret"), rotation)
            .await
    }

    /// Replays a subscription's dead deliveries (those that died at or after `since`).
    pub async fn replay_subscription(
        &self,
        id: u64,
        replay: &ReplayDeliveries,
    ) -> Result<Vec<u64>> {
        let answer: Replayed = self
            .post(&format!("/api/subscriptions/{id}/replay"), replay)
            .await?;
        Ok(answer.replayed)
    }

    // --- deliveries -------------------------------------------------------------------------

    /// A page of a subscription's deliveries.
    pub async fn list_deliveries(
        &self,
        subscription: u64,
        filter: &DeliveryFilter,
    ) -> Result<DeliveryPage> {
        self.get(
            &format!("/api/subscriptions/{subscription}/deliveries"),
            &filter.pairs(),
        )
        .await
    }

    /// The attempts of a page of a subscription's deliveries.
    pub async fn list_subscription_attempts(
        &self,
        subscription: u64,
        filter: &DeliveryFilter,
    ) -> Result<AttemptPage> {
        self.get(
            &format!("/api/subscriptions/{subscription}/attempts"),
            &filter.pairs(),
        )
        .await
    }

    /// One delivery with its attempts.
    pub async fn get_delivery(&self, id: u64) -> Result<Delivery> {
        self.get(&format!("/api/deliveries/{id}"), &[]).await
    }

    pub async fn delivery_attempts(&self, id: u64) -> Result<Vec<DeliveryAttempt>> {
        let answer: AttemptList = self
            .get(&format!("/api/deliveries/{id}/attempts"), &[])
            .await?;
        Ok(answer.attempts)
    }

    /// Replays a dead delivery (`409 not_dead` otherwise).
    pub async fn replay_delivery(&self, id: u64, replay: &ReplayDeliveries) -> Result<Vec<u64>> {
        if replay.has_since() {
            return Err(Error::Config(
                "since: applies to a subscription's replay, not one delivery's".to_owned(),
            ));
        }
        let answer: Replayed = self
            .post(&format!("/api/deliveries/{id}/replay"), replay)
            .await?;
        Ok(answer.replayed)
    }

    // --- the cluster -------------------------------------------------------------------------

    /// Every live server of the cluster with the workers each has seen (`GET /api/cluster`).
    /// On PostgreSQL every server answers the same, as of the last second; a token scoped to
    /// some queues sees the workers of those queues only.
    pub async fn cluster(&self) -> Result<Cluster> {
        self.get("/api/cluster", &[]).await
    }

    /// The cluster's activity per minute over the last `minutes` minutes, 1 to 1440 (`None`:
    /// the server's default, 60), with its sums (`GET /api/activity`).
    pub async fn activity(&self, minutes: Option<u32>) -> Result<Activity> {
        let query: Vec<(&str, String)> = minutes
            .map(|m| ("minutes", m.to_string()))
            .into_iter()
            .collect();
        self.get("/api/activity", &query).await
    }

    // --- tokens (admin) ---------------------------------------------------------------------

    /// Makes an API token; the answer is the only one that shows it.
    pub async fn create_token(&self, token: &NewToken) -> Result<CreatedToken> {
        self.post("/api/tokens", token).await
    }

    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let answer: TokenList = self.get("/api/tokens", &[]).await?;
        Ok(answer.tokens)
    }

    /// Revokes a token: it is refused from the next request on.
    pub async fn revoke_token(&self, id: u64) -> Result<()> {
        self.call_no_content(Method::DELETE, &format!("/api/tokens/{id}"))
            .await
    }
}

/// A queue or schedule name as a path segment. Valid names (letters, digits, `-_.:`) need no escaping;
/// anything else is escaped so that the server, not the URL, refuses it.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn request_id_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The start of an answer, for an error message.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut snippet: String = text.chars().take(200).collect();
    if snippet.len() < text.len() {
        snippet.push('…');
    }
    snippet
}

/// The error of a non-2xx answer: the server's typed error, or the answer as it came.
pub(crate) fn error_answer(status: StatusCode, request_id: Option<String>, bytes: &[u8]) -> Error {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(serde::Deserialize)]
    struct Detail {
        code: String,
        #[serde(default)]
        field: Option<String>,
        message: String,
        #[serde(default)]
        request_id: Option<String>,
    }
    match serde_json::from_slice::<Body>(bytes) {
        Ok(Body { error }) => Error::Api {
            status: status.as_u16(),
            code: error.code,
            field: error.field,
            message: error.message,
            request_id: error.request_id.or(request_id),
        },
        Err(_) => Error::UnexpectedAnswer {
            status: status.as_u16(),
            message: snippet(bytes),
            request_id,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_with_the_setting_named() {
        let error = Client::new("ftp://example.com").expect_err("refused");
        assert!(error.to_string().starts_with("url:"), "{error}");
        let error = Client::builder()
            .token("bad\ntoken")
            .build()
            .expect_err("refused");
        assert_eq!(error.to_string(), "token: must be printable ASCII");
        let error = Client::builder()
            .ca_pem("not a certificate")
            .build()
            .expect_err("refused");
        assert!(
            error.to_string().contains("holds no certificate"),
            "{error}"
        );
    }

    #[test]
    fn the_base_url_keeps_its_path() {
        let client = Client::new("http://127.0.0.1:7890/tenax/").expect("a client");
        assert_eq!(client.url(), "http://127.0.0.1:7890/tenax");
    }

    #[test]
    fn error_answers_are_typed() {
        let body = br#"{"error": {"status": 409, "code": "lease_lost", "message": "stale"}}"#;
        let error = error_answer(StatusCode::CONFLICT, Some("r-1".into()), body);
        assert!(error.is_lease_lost() && error.is_gone() && !error.is_transient());
        assert_eq!(error.request_id(), Some("r-1"));
        let error = error_answer(StatusCode::BAD_GATEWAY, None, b"<html>bad gateway</html>");
        assert!(matches!(error, Error::UnexpectedAnswer { status: 502, .. }));
        assert!(error.is_transient());
    }

    #[test]
    fn queue_names_are_path_segments() {
        assert_eq!(segment("team-a:emails.v2"), "team-a:emails.v2");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}

/// A backup as it arrives ([`Client::backup`]).
#[derive(Debug)]
pub struct Backup {
    response: reqwest::Response,
}

impl Backup {
    /// The next bytes of the archive; `None` at its end. An error when the server failed
    /// midway: the archive is cut, and must not be used.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>> {
        self.response.chunk().await.map_err(Error::Transport)
    }
}
