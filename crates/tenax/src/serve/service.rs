//! The router as hyper's service for one connection, recording each request in the
//! connection's [`Activity`]: in flight from the call (its head is complete) until its
//! response body has been sent or dropped, so that a long poll or a streaming take counts as
//! work, never as idleness. Each request carries the connection's peer address as axum's
//! [`ConnectInfo`] (a worker that gives no name is known by it), and the connection's
//! [`Upgraded`] handle.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::future::RouteFuture;
use hyper::body::{Frame, Incoming, SizeHint};

use super::activity::{Activity, InFlight};
use super::upgrade::Upgraded;

/// One connection's service.
#[derive(Debug, Clone)]
pub(super) struct Service {
    router: Router,
    activity: Arc<Activity>,
    peer: SocketAddr,
    /// Handed to each request, for a handler that takes the connection over (`upgrade`).
    upgraded: Upgraded,
}

impl Service {
    pub(super) fn new(
        router: Router,
        activity: Arc<Activity>,
        peer: SocketAddr,
        upgraded: Upgraded,
    ) -> Self {
        Self {
            router,
            activity,
            peer,
            upgraded,
        }
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = hyper::Response<Counted>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut request: hyper::Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        request.extensions_mut().insert(self.upgraded.clone());
        // The router is always ready (axum's `Router::poll_ready` is), so it is called without
        // asking first.
        let mut router = self.router.clone();
        Answer {
            call: tower::Service::call(&mut router, request.map(Body::new)),
            in_flight: Some(self.activity.begin()),
        }
    }
}

/// The router's answer to one request, which holds the request in flight until it becomes the
/// response body's (a request abandoned before its answer ends with this future).
pub(super) struct Answer {
    call: RouteFuture<Infallible>,
    in_flight: Option<InFlight>,
}

impl Future for Answer {
    type Output = Result<hyper::Response<Counted>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = ready!(Pin::new(&mut this.call).poll(cx))?;
        let in_flight = this.in_flight.take();
        Poll::Ready(Ok(response.map(|body| Counted {
            body,
            _in_flight: in_flight,
        })))
    }
}

/// A response body that keeps its request in flight until it is dropped.
#[derive(Debug)]
pub(super) struct Counted {
    body: Body,
    _in_flight: Option<InFlight>,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
