//! The frame of every page: head, navigation, the live switch, the session's CSRF token, and
//! the headers that keep the pages to this server's own assets.

use axum::http::HeaderName;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::Session;

/// Which part of the navigation a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Queues,
    Jobs,
    Dead,
    Schedules,
    Subscriptions,
    Workers,
    Policy,
}

const LINKS: [(Nav, &str, &str); 8] = [
    (Nav::Overview, "/ui", "Overview"),
    (Nav::Queues, "/ui/queues", "Queues"),
    (Nav::Jobs, "/ui/jobs", "Jobs"),
    (Nav::Dead, "/ui/dead", "Dead"),
    (Nav::Schedules, "/ui/schedules", "Schedules"),
    (Nav::Subscriptions, "/ui/subscriptions", "Subscriptions"),
    (Nav::Workers, "/ui/workers", "Workers"),
    (Nav::Policy, "/ui/policy", "Policy designer"),
];

/// Whether a page keeps itself up to date while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// It shows state that changes (counts, jobs, attempts): `app.js` fetches it again every
    /// few seconds and swaps in its new main content, while the live switch is on.
    Live,
    /// It shows what does not change by itself (a finished job, the policy designer's form).
    Still,
}

/// Headers of every page: nothing but this server's own scripts and styles may run, no other
/// site may frame it, and pages are not cached (they show live state).
pub fn headers() -> [(HeaderName, &'static str); 4] {
    [
        (
            CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
             script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
             form-action 'self'",
        ),
        (X_FRAME_OPTIONS, "DENY"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (CACHE_CONTROL, "no-store"),
    ]
}

/// A whole page.
pub fn page(
    session: &Session,
    nav: Nav,
    title: &str,
    refresh: Refresh,
    content: Markup,
) -> Response {
    let body = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(session.csrf);
                title { (title) " — Tenax" }
                link rel="stylesheet" href="/ui/assets/app.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/ui" { "Tenax" }
                    nav {
                        @for (item, href, label) in LINKS {
                            @if item == nav {
                                a.current href=(href) aria-current="page" { (label) }
                            } @else {
                                a href=(href) { (label) }
                            }
                        }
                    }
                    // Hidden until the script shows it on a live page: without JavaScript a
                    // page is a snapshot, and a switch would switch nothing.
                    button #live .live type="button" role="switch" aria-checked="true" hidden
                        title="Live: this page updates itself every few seconds" { "Live" }
                    @if session.signed_in {
                        form.logout method="post" action="/ui/logout" {
                            (csrf(session))
                            span.who { (session.principal.name.as_ref()) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main data-live[refresh == Refresh::Live] {
                    h1 { (title) }
                    (content)
                }
            }
        }
    };
    (headers(), Html(body.into_string())).into_response()
}

/// The hidden CSRF field every form carries.
pub fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A note at the top of a page (the outcome of an action), if the query carries one.
pub fn note(note: Option<&str>) -> Markup {
    html! {
        @if let Some(note) = note.filter(|n| !n.is_empty()) {
            p.note role="status" { (note) }
        }
    }
}

/// A status as a coloured label.
pub fn status(status: tenax_core::model::Status) -> Markup {
    html! { span class={"status " (status.name())} { (status.name().replace('_', " ")) } }
}
