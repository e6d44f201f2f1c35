//! The OpenAPI description served at `/api/openapi.json` and the routes are one: every described
//! operation is routed (it never gets the router's "no such endpoint" 404 or a 405), operation
//! ids are unique, every operation documents the error answers, and the description is OpenAPI
//! 3.1. (Schemathesis, run by `.ci/run`, then checks every answer against it.)

use std::collections::HashSet;

use common::TestServer;
use reqwest::Method;
use serde_json::Value;

use crate::common;

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

#[tokio::test]
async fn every_described_operation_is_routed() {
    let server = TestServer::manual().await;
    let spec = server.get("/api/openapi.json").await;
    assert_eq!(spec["openapi"], "3.1.0");
    let paths = spec["paths"].as_object().expect("paths");
    assert!(paths.len() >= 29, "{} paths", paths.len());
    let mut operation_ids = HashSet::new();
    let mut operations = 0;
    for (path, item) in paths {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            operations += 1;
            let id = operation["operationId"].as_str().expect("an operationId");
            assert!(operation_ids.insert(id.to_owned()), "{id} is used twice");
            let responses = operation["responses"].as_object().expect("responses");
            for status in ["400", "500", "503"] {
                assert!(
                    responses.contains_key(status) || path == "/healthz",
                    "{method} {path} does not document {status}"
                );
            }
            // Path parameters filled in with something the router matches.
            let concrete = path.replace("{id}", "1").replace("{name}", "q");
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            let mut request = server
                .api
                .http()
                .request(method.clone(), server.api.url(&concrete));
            if method != Method::GET && method != Method::DELETE {
                request = request
                    .header("content-type", "application/json")
                    .body("{}");
            }
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            assert_ne!(
                status, 405,
                "{method} {concrete} is described but not routed"
            );
            if status == 404 {
                let body: Value = response.json().await.expect("JSON");
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    !message.starts_with("no such endpoint"),
                    "{method} {concrete} is described but not routed: {body}"
                );
            }
        }
    }
    assert!(operations >= 36, "{operations} operations");
    // And a path that is not described is not routed either.
    let error = server
        .error(Method::GET, "/api/not-described", None, 404)
        .await;
    assert!(error.message.starts_with("no such endpoint"), "{error:?}");
}

/// Results are described: complete's `result` (one job and a batch), the job's `result`, and
/// the job read's `wait`.
#[tokio::test]
async fn results_and_the_wait_for_a_job_are_described() {
    let server = TestServer::manual().await;
    let spec = server.get("/api/openapi.json").await;
    let schemas = &spec["components"]["schemas"];
    for schema in ["CompleteOne", "AckItem", "JobView"] {
        assert!(
            schemas[schema]["properties"].get("result").is_some(),
            "{schema} has no result: {}",
            schemas[schema]
        );
    }
    let params = spec["paths"]["/api/jobs/{id}"]["get"]["parameters"]
        .as_array()
        .expect("parameters");
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "wait" && p["in"] == "query"),
        "{params:?}"
    );
}
