//! `cluster acl token --scope read|write`: derives a token of a narrower
//! scope from the management token (see [`stampede_proto::acl`]). Nothing is
//! sent to the servers: they check derived tokens against the same secret.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use stampede_proto::acl::{Acl, Scope};

#[derive(Debug, Clone, Subcommand)]
pub enum AclCmd {
    /// Print a new token of a scope, derived from the management token.
    Token(TokenOpts),
}

#[derive(Debug, Clone, Args)]
pub struct TokenOpts {
    /// `read` (every read call) or `write` (reads, and registering or
    /// stopping jobs and nodes).
    #[arg(long)]
    pub scope: Scope,
    /// The management token's file (as given to `cluster serve
    /// --acl-token-file`); or give the token itself with --token.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// The management token.
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub fn run(cmd: AclCmd) -> anyhow::Result<()> {
    match cmd {
        AclCmd::Token(opts) => {
            let management = match (&opts.token_file, &opts.token) {
                (Some(path), _) => std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read --token-file {}: {e}", path.display())
                })?,
                (None, Some(t)) => t.clone(),
                (None, None) => anyhow::bail!(
                    "the management token is needed: --token-file FILE, --token or STAMPEDE_TOKEN"
                ),
            };
            let acl = Acl::new(&management)?;
            if opts.scope == Scope::Management {
                anyhow::bail!("--scope management: use the management token itself");
            }
            println!("{}", acl.derive(opts.scope));
            Ok(())
        }
    }
}
