//! HTTP requests by method, route and status, and their latency by method and route. The route
//! is the matched template (`/api/jobs/{id}`), never the path itself, so the label set is the
//! server's routes; requests that match none are counted under [`UNMATCHED`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::{Histogram, REQUEST_SECONDS};

/// A take counted in `tenax_http_takes_waiting` while it is alive.
#[derive(Debug)]
pub struct WaitingTake(Gauge);

impl Drop for WaitingTake {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The route of a request no route matched (a 404).
pub const UNMATCHED: &str = "(unmatched)";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

/// The methods the API knows; any other is counted as `OTHER`, so the label stays bounded.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The series of one method and route.
#[derive(Debug)]
struct RouteSeries {
    latency: Histogram,
    /// By status; a route answers few distinct ones.
    by_status: RwLock<Vec<(u16, Counter)>>,
}

/// One route's series, by method.
type ByMethod = Vec<(&'static str, Arc<RouteSeries>)>;

#[derive(Debug)]
pub struct HttpMetrics {
    /// Takes waiting for a job now: long polls in their wait, streams between jobs.
    takes_waiting: Gauge,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// By route, then method: bounded by the server's routes.
    routes: RwLock<HashMap<Box<str>, ByMethod>>,
}

fn request_seconds() -> Histogram {
    Histogram::seconds(REQUEST_SECONDS)
}

impl HttpMetrics {
    /// Counts a take as waiting until the guard is dropped.
    pub fn take_waiting(&self) -> WaitingTake {
        self.takes_waiting.inc();
        WaitingTake(self.takes_waiting.clone())
    }

    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            takes_waiting: Gauge::default(),
            requests: Family::default(),
            latency: Family::new_with_constructor(request_seconds as fn() -> Histogram),
            routes: RwLock::new(HashMap::new()),
        };
        registry.register(
            "tenax_http_takes_waiting",
            "Takes waiting for a job now on this server: long polls in their wait, streams \
             between jobs",
            metrics.takes_waiting.clone(),
        );
        registry.register(
            "tenax_http_requests",
            "HTTP requests answered, by method, route template and status",
            metrics.requests.clone(),
        );
        registry.register_with_unit(
            "tenax_http_request_duration",
            "Time from a request's arrival to its answer, by method and route template",
            Unit::Seconds,
            metrics.latency.clone(),
        );
        metrics
    }

    /// Counts a request to `route` (a template, or [`UNMATCHED`]) answered `status` after
    /// `elapsed`.
    pub fn answered(&self, method: &Method, route: &str, status: u16, elapsed: Duration) {
        let method = method_label(method);
        let series = self.route(method, route);
        series.latency.observe_duration(elapsed);
        let known = series
            .by_status
            .read()
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, counter)| counter.clone());
        let counter = known.unwrap_or_else(|| {
            let mut by_status = series.by_status.write();
            if let Some((_, counter)) = by_status.iter().find(|(s, _)| *s == status) {
                return counter.clone();
            }
            let counter = self.requests.get_or_create_owned(&RequestLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status,
            });
            by_status.push((status, counter.clone()));
            counter
        });
        counter.inc();
    }

    fn route(&self, method: &'static str, route: &str) -> Arc<RouteSeries> {
        let find = |methods: &ByMethod| {
            methods
                .iter()
                .find(|(m, _)| *m == method)
                .map(|(_, s)| s.clone())
        };
        if let Some(series) = self.routes.read().get(route).and_then(find) {
            return series;
        }
        let mut routes = self.routes.write();
        let methods = routes.entry(route.into()).or_default();
        if let Some(series) = find(methods) {
            return series;
        }
        let series = Arc::new(RouteSeries {
            latency: self.latency.get_or_create_owned(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
            }),
            by_status: RwLock::new(Vec::new()),
        });
        methods.push((method, series.clone()));
        series
    }
}
