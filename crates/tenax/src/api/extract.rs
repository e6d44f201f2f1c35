//! Request extraction that names the field: JSON bodies are decoded with the path of the first
//! bad field (`jobs[2].priority`), unknown fields are refused by the request types, and bodies
//! over the size limit get a clear 413.

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON body of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(body_error)?;
        decode(&bytes).map(JsonBody)
    }
}

/// Decodes JSON naming the path of the first field that does not fit.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid("", "the request needs a JSON body"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let mut field = if path == "." { String::new() } else { path };
        let inner = error.into_inner();
        let message = inner.to_string();
        // "missing field `queue`" is reported on the object that lacks it: name the field.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            field = if field.is_empty() {
                name.to_owned()
            } else {
                format!("{field}.{name}")
            };
        }
        // serde_json appends " at line L column C"; the field path says more.
        let message = match message.find(" at line ") {
            Some(at) if inner.is_data() => message[..at].to_owned(),
            _ => message,
        };
        ApiError::invalid(field, message)
    })
}

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            field: None,
            message: "the request body is larger than the server's limit (--max-request-bytes)"
                .into(),
        }
    } else {
        ApiError::invalid("", rejection.body_text())
    }
}

/// A JSON body that may be left out: an empty body gives `T::default()`.
#[derive(Debug)]
pub struct JsonOrEmpty<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for JsonOrEmpty<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(body_error)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        decode(&bytes).map(JsonOrEmpty)
    }
}
