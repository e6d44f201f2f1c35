//! `tenax tokens`: create, list and revoke API tokens (needs an unscoped admin token).

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::CliError;
use super::client::{Client, ServerArgs, block_on};
use super::terminal::safe;

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make a token; it is printed once and cannot be shown again.
    Create(CreateArgs),
    /// List tokens (never the tokens themselves).
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Revoke a token: it is refused from the next request on.
    Revoke {
        id: u64,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// What the token is for.
    #[arg(long)]
    pub name: String,
    /// admin, producer (enqueue and read), worker (take, heartbeat, complete, fail) or reader.
    #[arg(long)]
    pub role: String,
    /// A queue-name pattern it may touch (`*` for any run of characters); repeat for more.
    /// None: every queue.
    #[arg(long = "queue")]
    pub queues: Vec<String>,
    /// A Zaqar project id (pattern) it may act for; repeat for more. None: every project.
    #[arg(long = "project")]
    pub projects: Vec<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn run(command: TokensCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            TokensCommand::Create(args) => {
                let body = json!({
                    "name": args.name, "role": args.role,
                    "queues": args.queues, "projects": args.projects,
                });
                let made = Client::new(&args.server)?
                    .post("/api/tokens", &body)
                    .await?;
                eprintln!(
                    "made token {} ({}); it is shown once, here:",
                    made["id"],
                    safe(made["role"].as_str().unwrap_or_default())
                );
                println!("{}", safe(made["token"].as_str().unwrap_or_default()));
                Ok(())
            }
            TokensCommand::List { server } => {
                let list = Client::new(&server)?.get("/api/tokens").await?;
                println!(
                    "{:>5}  {:<24} {:<9} {:<24} {:<24}  scopes",
                    "id", "name", "role", "created", "last used"
                );
                for token in list["tokens"].as_array().into_iter().flatten() {
                    println!(
                        "{:>5}  {:<24} {:<9} {:<24} {:<24}  {}",
                        token["id"],
                        safe(token["name"].as_str().unwrap_or_default()),
                        safe(token["role"].as_str().unwrap_or_default()),
                        safe(token["created_at"].as_str().unwrap_or_default()),
                        safe(token["last_used_at"].as_str().unwrap_or("never")),
                        safe(&scopes(token)),
                    );
                }
                Ok(())
            }
            TokensCommand::Revoke { id, server } => {
                Client::new(&server)?
                    .delete(&format!("/api/tokens/{id}"))
                    .await?;
                println!("revoked token {id}");
                Ok(())
            }
        }
    })
}

/// A token's scopes in words.
fn scopes(token: &Value) -> String {
    let list = |field: &str| -> Vec<String> {
        token[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let (queues, projects) = (list("queues"), list("projects"));
    match (queues.is_empty(), projects.is_empty()) {
        (true, true) => "all".into(),
        (false, true) => format!("queues {}", queues.join(", ")),
        (true, false) => format!("projects {}", projects.join(", ")),
        (false, false) => format!(
            "queues {}; projects {}",
            queues.join(", "),
            projects.join(", ")
        ),
    }
}
