//! The stylesheet and the script, compiled into the binary: `cargo run` serves the whole
//! dashboard with nothing else to install, and no page asks another site for anything.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::response::{IntoResponse, Response};

use super::UiError;

const STYLE: &str = include_str!("assets/app.css");
const SCRIPT: &str = include_str!("assets/app.js");
const ICON: &str = include_str!("assets/favicon.svg");

pub async fn serve(Path(name): Path<String>) -> Response {
    let (content_type, text) = match name.as_str() {
        "app.css" => ("text/css; charset=utf-8", STYLE),
        "app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "favicon.svg" => ("image/svg+xml", ICON),
        _ => return UiError::not_found(format!("no asset named {name:?}")).into_response(),
    };
    (
        [
            (CONTENT_TYPE, content_type),
            // Assets change only with the binary; an hour keeps pages quick and a new
            // version visible soon after an upgrade.
            (CACHE_CONTROL, "public, max-age=3600"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}
