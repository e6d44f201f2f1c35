//! `tenax tokens`: create, list and revoke API tokens (needs an unscoped admin token).

use clap::{Args, Subcommand, ValueEnum};
use tenax_client::{NewToken, Role, TokenInfo};

use super::client::{Server, ServerArgs, block_on};
use super::terminal::safe;
use super::{CliError, output};

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
    #[arg(long, value_enum)]
    pub role: RoleArg,
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

/// A token's role, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Admin,
    Producer,
    Worker,
    Reader,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Admin => Self::Admin,
            RoleArg::Producer => Self::Producer,
            RoleArg::Worker => Self::Worker,
            RoleArg::Reader => Self::Reader,
        }
    }
}

pub fn run(command: TokensCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            TokensCommand::Create(args) => {
                let token = NewToken::new(&args.name, args.role.into())
                    .queues(&args.queues)
                    .projects(&args.projects);
                let server = Server::connect(&args.server)?;
                let made = server.ask(server.create_token(&token)).await?;
                eprintln!(
                    "made token {} ({}); it is shown once, here:",
                    made.info.id, made.info.role
                );
                println!("{}", safe(&made.token));
                Ok(())
            }
            TokensCommand::List { server } => {
                let server = Server::connect(&server)?;
                let tokens = server.ask(server.list_tokens()).await?;
                println!(
                    "{:>5}  {:<24} {:<9} {:<24} {:<24}  scopes",
                    "id", "name", "role", "created", "last used"
                );
                for token in &tokens {
                    println!(
                        "{:>5}  {:<24} {:<9} {:<24} {:<24}  {}",
                        token.id,
                        safe(&token.name),
                        token.role,
                        output::time(token.created_at),
                        output::time_or(token.last_used_at, "never"),
                        safe(&scopes(token)),
                    );
                }
                Ok(())
            }
            TokensCommand::Revoke { id, server } => {
                let server = Server::connect(&server)?;
                server.ask(server.revoke_token(id)).await?;
                println!("revoked token {id}");
                Ok(())
            }
        }
    })
}

/// A token's scopes in words.
fn scopes(token: &TokenInfo) -> String {
    let (queues, projects) = (token.queues.join(", "), token.projects.join(", "));
    match (queues.is_empty(), projects.is_empty()) {
        (true, true) => "all".into(),
        (false, true) => format!("queues {queues}"),
        (true, false) => format!("projects {projects}"),
        (false, false) => format!("queues {queues}; projects {projects}"),
    }
}
