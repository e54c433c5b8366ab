//! How a process proves to the cluster who it is, and checks that it talks to
//! a real server: mutual TLS with certificates from the cluster's CA whose
//! subject alternative name carries the role (as Nomad's
//! `server.<region>.nomad`), and an ACL token ([`crate::acl`]) for the
//! public API.
//!
//! Every client binary takes the same flags, [`ClientSecurityArgs`]; a
//! directory written by `cluster tls init` holds one file of each kind.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The name every server certificate carries, and which clients check for:
/// a certificate of another role cannot pose as a server.
pub const SERVER_NAME: &str = "server.stampede";

/// What a certificate allows its holder to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A cluster member: raft, forwarded writes, the broker and plans.
    Server,
    /// A node agent (nodesim): node calls and the public API.
    Client,
    /// A person or a load generator: the public API and the admin calls.
    Operator,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Server, Role::Client, Role::Operator];

    /// The DNS name in the certificate's subject alternative names.
    pub fn dns_name(self) -> &'static str {
        match self {
            Role::Server => SERVER_NAME,
            Role::Client => "client.stampede",
            Role::Operator => "operator.stampede",
        }
    }

    /// The role a certificate's DNS name grants, if any.
    pub fn from_dns_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.dns_name() == name)
    }

    /// The file stem of this role's certificate and key in a TLS directory.
    pub fn file_stem(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Operator => "operator",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.file_stem())
    }
}

/// The CA certificate's file in a TLS directory.
pub const CA_FILE: &str = "ca.pem";
/// The CA's private key's file in a TLS directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// The management token's file in a TLS directory.
pub const TOKEN_FILE: &str = "token";

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("--tls-ca, --tls-cert and --tls-key go together: {0} is missing")]
    Partial(&'static str),
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {path}: {detail}")]
    Invalid {
        flag: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("--token: {0}")]
    Token(String),
}

/// The PEM files of one identity: the CA to check the other side against,
/// and this side's certificate and key.
#[derive(Clone)]
pub struct TlsMaterial {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsMaterial { .. }")
    }
}

impl TlsMaterial {
    /// How a client (or a server calling a peer) sets up its TLS: the
    /// cluster CA, its own certificate, and the server name to check.
    pub fn client_config(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(SERVER_NAME)
    }
}

/// `--tls-ca`, `--tls-cert`, `--tls-key`: all three, or none.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// The cluster CA's certificate (PEM); the other side must present a
    /// certificate it signed.
    #[arg(long, env = "STAMPEDE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This process's certificate (PEM), signed by the cluster CA.
    #[arg(long, env = "STAMPEDE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The key of `--tls-cert` (PEM).
    #[arg(long, env = "STAMPEDE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The files of `role` in a directory written by `cluster tls init`.
    pub fn in_dir(dir: &Path, role: Role) -> Self {
        let stem = role.file_stem();
        Self {
            tls_ca: Some(dir.join(CA_FILE)),
            tls_cert: Some(dir.join(format!("{stem}.pem"))),
            tls_key: Some(dir.join(format!("{stem}.key"))),
        }
    }

    pub fn is_set(&self) -> bool {
        self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some()
    }

    /// The same flags, for a child process's command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (flag, path) in [
            ("--tls-ca", &self.tls_ca),
            ("--tls-cert", &self.tls_cert),
            ("--tls-key", &self.tls_key),
        ] {
            if let Some(p) = path {
                args.push(flag.to_string());
                args.push(p.display().to_string());
            }
        }
        args
    }

    /// Reads the three files; `None` when no flag is given.
    pub fn load(&self) -> Result<Option<TlsMaterial>, SecurityError> {
        if !self.is_set() {
            return Ok(None);
        }
        let need =
            |p: &Option<PathBuf>, flag: &'static str| p.clone().ok_or(SecurityError::Partial(flag));
        let ca = need(&self.tls_ca, "--tls-ca")?;
        let cert = need(&self.tls_cert, "--tls-cert")?;
        let key = need(&self.tls_key, "--tls-key")?;
        Ok(Some(TlsMaterial {
            ca: read_pem(&ca, "--tls-ca", "CERTIFICATE")?,
            cert: read_pem(&cert, "--tls-cert", "CERTIFICATE")?,
            key: read_pem(&key, "--tls-key", "PRIVATE KEY")?,
        }))
    }
}

/// Reads a PEM file and checks that it holds a block of `kind` (for keys,
/// any `... PRIVATE KEY` block), so a swapped or empty file is named here
/// rather than failing later inside a TLS handshake.
fn read_pem(path: &Path, flag: &'static str, kind: &str) -> Result<Vec<u8>, SecurityError> {
    let bytes = std::fs::read(path).map_err(|source| SecurityError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(kind) && l.ends_with("-----"));
    if !found {
        return Err(SecurityError::Invalid {
            flag,
            path: path.to_path_buf(),
            detail: format!("no PEM block of type {kind}"),
        });
    }
    Ok(bytes)
}

/// Every client's flags: TLS and the ACL token.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientSecurityArgs {
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The ACL token to send with every call (`cluster tls init` writes a
    /// management token; `cluster acl token` derives read or write ones).
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Send the token over plain TCP too (to a TLS-terminating proxy on
    /// this host, say); without it, a token without TLS is refused, since it
    /// would cross the network in clear.
    #[arg(long)]
    pub insecure: bool,
}

impl ClientSecurityArgs {
    pub fn load(&self) -> Result<Security, SecurityError> {
        let token = match &self.token {
            Some(t) if t.trim().is_empty() => {
                return Err(SecurityError::Token("is empty".into()));
            }
            Some(t) => Some(t.trim().to_string()),
            None => None,
        };
        let tls = self.tls.load()?;
        if token.is_some() && tls.is_none() && !self.insecure {
            return Err(SecurityError::Token(
                "is sent only over TLS: give --tls-ca, --tls-cert and --tls-key, or --insecure to send it in clear (or unset STAMPEDE_TOKEN for an --insecure cluster)".into(),
            ));
        }
        Ok(Security { tls, token })
    }

    /// The same flags, for a child process's command line. The token goes
    /// through the environment instead (see [`Security::token`]), so that it
    /// does not show in `ps`.
    pub fn tls_args(&self) -> Vec<String> {
        self.tls.to_args()
    }
}

/// What a client presents: its TLS identity (none on an `--insecure`
/// cluster) and its token (none when the cluster has no ACLs).
#[derive(Debug, Clone, Default)]
pub struct Security {
    pub tls: Option<TlsMaterial>,
    pub token: Option<String>,
}

impl Security {
    /// Plain TCP and no token: for clusters started with `--insecure`.
    pub fn insecure() -> Self {
        Self::default()
    }

    /// `http` or `https`, for URLs of a server's gRPC and HTTP addresses.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The value of the `authorization` header, if there is a token.
    pub fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_goes_only_over_tls_unless_told_insecure() {
        let plain = ClientSecurityArgs {
            token: Some("secret".into()),
            ..Default::default()
        };
        let err = plain.load().unwrap_err().to_string();
        assert!(err.starts_with("--token: is sent only over TLS"), "{err}");
        let told = ClientSecurityArgs {
            insecure: true,
            ..plain
        };
        assert_eq!(told.load().unwrap().token.as_deref(), Some("secret"));
        let none = ClientSecurityArgs::default().load().unwrap();
        assert!(none.tls.is_none() && none.token.is_none());
    }
}
