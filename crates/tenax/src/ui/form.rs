//! What an action's form sent, and where the browser goes after it: back to the page the form
//! was on (its `back` field, when that is a dashboard page), with a note saying what happened.

use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::queues::urlencode;
use super::session::is_dashboard_path;

/// The query of a page an action came back to: the note saying what the action did.
#[derive(Debug, Deserialize)]
pub struct NoteQuery {
    pub note: Option<String>,
}

/// A form's fields, in the order sent (a name may come more than once: ticked ids).
#[derive(Debug, Default)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    pub fn parse(body: &[u8]) -> Self {
        Self(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// Every value of `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The page to go back to: the form's `back`, if it is a dashboard page, else `fallback`.
    /// Never another site, so a forged `back` cannot send the browser away.
    pub fn back(&self, fallback: &str) -> String {
        self.get("back")
            .filter(|b| b.starts_with("/ui/") && is_dashboard_path(b))
            .unwrap_or_else(|| fallback.to_owned())
    }
}

/// A redirect to `back` with `note` shown at the top of the page.
pub fn back_with(back: &str, note: &str) -> Response {
    let separator = if back.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{back}{separator}note={}", urlencode(note))).into_response()
}
