//! A cluster's credentials: its CA, certificates and management token
//! (`cluster tls init`), the security of each role from them, and an HTTP
//! client of the servers that presents one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use stampede_proto::acl::{Acl, Scope};
use stampede_proto::security::{Role, Security, TlsArgs, TOKEN_FILE};

use crate::error::LaunchError;

/// Makes the cluster's CA, certificates and token with `bin tls init`,
/// unless a previous run left them in `dir`.
pub fn make_tls_dir(bin: &Path, dir: &Path) -> Result<(), LaunchError> {
    if dir.join(TOKEN_FILE).exists() {
        return Ok(());
    }
    let tls_err = |detail: String| LaunchError::Tls {
        dir: dir.to_path_buf(),
        detail,
    };
    let out = Command::new(bin)
        .args(["tls", "init"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tls_err(format!("cannot run {} tls init: {e}", bin.display())))?;
    if !out.status.success() {
        return Err(tls_err(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// The security of `role` from a directory written by `cluster tls init`.
pub fn security_in(dir: Option<&Path>, role: Role) -> Result<Security, LaunchError> {
    let Some(dir) = dir else {
        return Ok(Security::insecure());
    };
    let tls_err = |detail: String| LaunchError::Tls {
        dir: dir.to_path_buf(),
        detail,
    };
    let tls = TlsArgs::in_dir(dir, role)
        .load()
        .map_err(|e| tls_err(e.to_string()))?;
    let management = std::fs::read_to_string(dir.join(TOKEN_FILE))
        .map_err(|e| tls_err(format!("{TOKEN_FILE}: {e}")))?;
    let token = match role {
        Role::Client => Acl::new(&management)
            .map_err(|e| tls_err(e.to_string()))?
            .derive(Scope::Write),
        Role::Server | Role::Operator => management.trim().to_string(),
    };
    Ok(Security {
        tls,
        token: Some(token),
    })
}

/// An HTTP client of the servers' `--http` addresses, presenting
/// `security`, whose requests give up after `timeout`.
pub fn http_client(security: &Security, timeout: Duration) -> Result<reqwest::Client, LaunchError> {
    // A server closes a connection that sends no request for its
    // header-read timeout (10 s by default); a pooled connection kept
    // longer than that races the close and fails the next request.
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .pool_idle_timeout(Duration::from_secs(5));
    let tls_err = |detail: String| LaunchError::Tls {
        dir: PathBuf::new(),
        detail,
    };
    if let Some(tls) = &security.tls {
        let ca = reqwest::Certificate::from_pem(&tls.ca).map_err(|e| tls_err(e.to_string()))?;
        let identity = reqwest::Identity::from_pem(&[tls.cert.as_slice(), &tls.key].concat())
            .map_err(|e| tls_err(e.to_string()))?;
        builder = builder
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(identity);
    }
    if let Some(bearer) = security.bearer() {
        let mut headers = reqwest::header::HeaderMap::new();
        let mut value = reqwest::header::HeaderValue::from_str(&bearer)
            .map_err(|e| tls_err(format!("the token: {e}")))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
        builder = builder.default_headers(headers);
    }
    builder.build().map_err(|e| tls_err(e.to_string()))
}
