//! Zaqar's websocket scenarios, the HTTP ones of [`super::zaqar`] over one websocket per
//! connection (the server's root, `ws://host:port/`): `zaqar-ws-post-10` (ten messages per
//! `message_post` frame) and `zaqar-ws-claim-delete` (a filled queue drained by `claim_create`
//! of up to 10, then one `message_delete` frame per message with its claim id).
//!
//! A connection sends a frame and waits for its answer before the next, as Zaqar's clients do.

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::zaqar::{
    CLAIM_LIMIT, CONNECTIONS, Link, Names, claim_delete_with, messages, post_with, queue,
};
use super::{Ctx, ScenarioReport};

/// One websocket speaking Zaqar's frames as the project `bench`.
struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    headers: Value,
    post: Value,
    claim: Value,
    queue: String,
}

impl Ws {
    async fn open(ctx: &Ctx) -> anyhow::Result<Self> {
        let base = ctx.api.url("/");
        let Some(rest) = base.strip_prefix("http://") else {
            bail!("the websocket scenarios speak plain ws:// only; {base} is not http://");
        };
        let mut request = format!("ws://{rest}")
            .into_client_request()
            .context("the websocket URL")?;
        let mut headers = json!({"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c",
                                 "X-Project-ID": "bench"});
        if let Some(token) = &ctx.config.client.token {
            headers["X-Auth-Token"] = json!(token);
            request.headers_mut().insert(
                "x-auth-token",
                token.parse().context("the token as a header")?,
            );
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .context("opening the websocket")?;
        let queue = queue(ctx);
        Ok(Self {
            socket,
            headers,
            post: json!({"queue_name": queue, "messages": messages(CLAIM_LIMIT)}),
            claim: json!({"queue_name": queue, "ttl": 300, "grace": 60, "limit": CLAIM_LIMIT}),
            queue,
        })
    }

    /// Sends one action and waits for its answer: its status and body.
    async fn ask(&mut self, action: &str, body: &Value) -> anyhow::Result<(u64, Value)> {
        let frame = json!({"action": action, "headers": self.headers, "body": body});
        self.socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .context("sending a frame")?;
        loop {
            let message = self
                .socket
                .next()
                .await
                .context("the server closed the websocket")?
                .context("reading a frame")?;
            if let Message::Text(text) = message {
                let answer: Value = serde_json::from_str(&text).context("a JSON answer")?;
                let status = answer["headers"]["status"].as_u64().unwrap_or(0);
                return Ok((status, answer["body"].clone()));
            }
        }
    }
}

#[async_trait]
impl Link for Ws {
    async fn post(&mut self) -> anyhow::Result<()> {
        let body = self.post.clone();
        match self.ask("message_post", &body).await? {
            (201, _) => Ok(()),
            (status, answer) => bail!("message_post answered {status}: {answer}"),
        }
    }

    async fn claim(&mut self) -> anyhow::Result<Option<Vec<Value>>> {
        let body = self.claim.clone();
        match self.ask("claim_create", &body).await? {
            (204, _) => Ok(None),
            (201, claimed) => Ok(Some(
                claimed["messages"].as_array().cloned().unwrap_or_default(),
            )),
            (status, answer) => bail!("claim_create answered {status}: {answer}"),
        }
    }

    async fn delete(&mut self, message: &Value) -> anyhow::Result<()> {
        // A claimed message shows its claim (Zaqar's websocket `format_message`).
        let body = json!({"queue_name": self.queue, "message_id": message["id"],
                          "claim_id": message["claim_id"]});
        match self.ask("message_delete", &body).await? {
            (204, _) => Ok(()),
            (status, answer) => bail!("message_delete answered {status}: {answer}"),
        }
    }
}

/// One websocket per connection.
async fn open_all(ctx: &Ctx) -> anyhow::Result<Vec<Ws>> {
    let mut sockets = Vec::new();
    for _ in 0..ctx.config.connections.unwrap_or(CONNECTIONS) {
        sockets.push(Ws::open(ctx).await?);
    }
    Ok(sockets)
}

fn names() -> Names {
    Names {
        post: format!("message_post frame ({CLAIM_LIMIT}/frame)"),
        claim: "claim_create frame",
        delete: "message_delete frame",
        how: "one message_delete frame each",
        connections: "websockets",
    }
}

pub(super) async fn post_scenario(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let links = open_all(ctx).await?;
    post_with(ctx, links, CLAIM_LIMIT, &names()).await
}

pub(super) async fn claim_delete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let fill = open_all(ctx).await?;
    let drain = open_all(ctx).await?;
    claim_delete_with(ctx, fill, drain, &names()).await
}
