//! A scripted SMTP server on a loopback port: real SMTP (RFC 5321) over TCP, enough for a real
//! client (greeting, EHLO/HELO, MAIL, RCPT, DATA with dot-unstuffing, RSET, NOOP, QUIT). It
//! records each mail it accepts; the test chooses how it answers each mail's end of data:
//! `250` (accepted) or a 4xx/5xx refusal, in order, then one reply for every later mail.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// A mail as received: its envelope and its data (headers and text).
#[derive(Debug, Clone)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
}

impl Mail {
    /// The value of header `name` (unfolded), if the mail has it.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next().unwrap_or_default();
        let mut value: Option<String> = None;
        for line in head.split("\r\n") {
            if let Some(folded) = line.strip_prefix([' ', '\t']) {
                if let Some(v) = value.as_mut() {
                    v.push(' ');
                    v.push_str(folded.trim());
                }
                continue;
            }
            if value.is_some() {
                break;
            }
            if let Some((key, rest)) = line.split_once(':') {
                if key.eq_ignore_ascii_case(name) {
                    value = Some(rest.trim().to_owned());
                }
            }
        }
        value
    }

    /// The text after the headers, decoded from its `Content-Transfer-Encoding` (7bit, 8bit,
    /// quoted-printable or base64), as a mail reader shows it.
    pub fn text(&self) -> String {
        let raw = self
            .data
            .split_once("\r\n\r\n")
            .map(|(_, text)| text.to_owned())
            .unwrap_or_default();
        let encoding = self
            .header("Content-Transfer-Encoding")
            .unwrap_or_default()
            .to_ascii_lowercase();
        match encoding.as_str() {
            "quoted-printable" => quoted_printable(&raw),
            "base64" => {
                use base64::Engine as _;
                let joined: String = raw.split_whitespace().collect();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(joined)
                    .expect("base64 text");
                String::from_utf8(bytes).expect("UTF-8 text")
            }
            _ => raw,
        }
    }
}

/// Quoted-printable text decoded (RFC 2045 §6.7): soft line breaks joined, `=XX` as bytes.
fn quoted_printable(text: &str) -> String {
    let joined = text.replace("=\r\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("UTF-8 text")
}

#[derive(Debug)]
struct Script {
    /// Replies to the end of data, in order; when empty, `then` for every later mail.
    replies: VecDeque<u16>,
    then: u16,
    accepted: Vec<Mail>,
    /// Mails refused, by the reply given.
    refused: Vec<u16>,
}

/// The running server.
#[derive(Debug)]
pub struct SmtpServer {
    pub address: SocketAddr,
    script: Arc<Mutex<Script>>,
    arrived: Arc<Notify>,
    /// Turns true when the server shuts: its sessions hang up.
    closing: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SmtpServer {
    /// Answers the end of each mail's data with `replies` in order, then `then`.
    pub async fn start(replies: Vec<u16>, then: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the SMTP server");
        let address = listener.local_addr().expect("the SMTP server's address");
        let script = Arc::new(Mutex::new(Script {
            replies: replies.into(),
            then,
            accepted: Vec::new(),
            refused: Vec::new(),
        }));
        let arrived = Arc::new(Notify::new());
        let (closing, closed) = tokio::sync::watch::channel(false);
        let (shared, notify) = (script.clone(), arrived.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mut closed = closed.clone();
                let session = session(stream, shared.clone(), notify.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = session => {}
                        _ = closed.wait_for(|closed| *closed) => {}
                    }
                });
            }
        });
        Self {
            address,
            script,
            arrived,
            closing,
            task,
        }
    }

    /// `smtp://127.0.0.1:port`, for `--smtp-url`.
    pub fn url(&self) -> String {
        format!("smtp://{}", self.address)
    }

    pub fn accepted(&self) -> Vec<Mail> {
        self.script.lock().accepted.clone()
    }

    pub fn refused(&self) -> Vec<u16> {
        self.script.lock().refused.clone()
    }

    /// Waits until `n` mails have been accepted, or panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Mail> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let accepted = self.accepted();
            if accepted.len() >= n {
                return accepted;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!(
                    "the SMTP server accepted {} mails within {within:?}, expected {n}",
                    accepted.len()
                );
            }
        }
    }

    /// Stops listening and hangs up on every client: later connections are refused.
    pub fn shut(&self) {
        self.task.abort();
        self.closing.send_replace(true);
    }
}

/// The text of reply `code`.
fn reply(code: u16) -> String {
    match code {
        250 => "250 2.0.0 OK: queued".to_owned(),
        400..=499 => format!("{code} 4.3.0 try again later"),
        _ => format!("{code} 5.7.1 refused for good"),
    }
}

/// One client's session: commands until QUIT or the connection ends.
async fn session(stream: TcpStream, script: Arc<Mutex<Script>>, arrived: Arc<Notify>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let line_of = |text: &str| format!("{text}\r\n").into_bytes();
    if write
        .write_all(&line_of("220 localhost ESMTP tenax-test"))
        .await
        .is_err()
    {
        return;
    }
    let (mut from, mut to) = (String::new(), Vec::new());
    while let Ok(Some(line)) = lines.next_line().await {
        let upper = line.to_ascii_uppercase();
        let answer = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            "250 localhost".to_owned()
        } else if let Some(rest) = upper.strip_prefix("MAIL FROM:") {
            from = line[line.len() - rest.len()..].trim().to_owned();
            to.clear();
            "250 2.1.0 OK".to_owned()
        } else if let Some(rest) = upper.strip_prefix("RCPT TO:") {
            to.push(line[line.len() - rest.len()..].trim().to_owned());
            "250 2.1.5 OK".to_owned()
        } else if upper == "DATA" {
            if write
                .write_all(b"354 end data with <CR><LF>.<CR><LF>\r\n")
                .await
                .is_err()
            {
                return;
            }
            let mut data = Vec::new();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) if line == "." => break,
                    Ok(Some(line)) => {
                        let line = line.strip_prefix('.').map_or(line.clone(), str::to_owned);
                        data.push(line);
                    }
                    _ => return,
                }
            }
            let mail = Mail {
                from: from.clone(),
                to: to.clone(),
                data: data.join("\r\n"),
            };
            let code = {
                let mut script = script.lock();
                let code = script.replies.pop_front().unwrap_or(script.then);
                if code == 250 {
                    script.accepted.push(mail);
                } else {
                    script.refused.push(code);
                }
                code
            };
            arrived.notify_waiters();
            reply(code)
        } else if upper == "RSET" || upper == "NOOP" {
            "250 2.0.0 OK".to_owned()
        } else if upper == "QUIT" {
            let _ = write.write_all(b"221 2.0.0 bye\r\n").await;
            return;
        } else {
            "502 5.5.2 command not implemented".to_owned()
        };
        if write.write_all(&line_of(&answer)).await.is_err() {
            return;
        }
    }
}
