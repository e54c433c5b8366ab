//! `cluster tls init DIR`: a cluster CA and one certificate of each role,
//! plus a management ACL token, for local clusters and tests. Real
//! deployments may use their own CA as long as the certificates carry the
//! role names of [`Role::dns_name`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use stampede_proto::acl::Acl;
use stampede_proto::security::{Role, CA_FILE, CA_KEY_FILE, TOKEN_FILE};
use time::{Duration, OffsetDateTime};

#[derive(Debug, Clone, Subcommand)]
pub enum TlsCmd {
    /// Create a CA, a server, a client (node) and an operator certificate,
    /// and a management token, in DIR.
    Init(InitOpts),
}

#[derive(Debug, Clone, Args)]
pub struct InitOpts {
    /// Where to write ca.pem, ca.key, server.pem/.key, client.pem/.key,
    /// operator.pem/.key and token.
    pub dir: PathBuf,
    /// More names or IP addresses for the server certificate, besides
    /// localhost and 127.0.0.1 (repeat, or comma-separated): the addresses
    /// clients dial. Clients check the role name server.stampede, so these
    /// matter only to other tools.
    #[arg(long = "san", value_delimiter = ',')]
    pub sans: Vec<String>,
    /// Years the certificates stay valid.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=50))]
    pub years: u16,
    /// Replace files that are already there.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsInitError {
    #[error("{0} already exists; pass --force to replace it")]
    Exists(PathBuf),
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("--san {0:?}: {1}")]
    BadName(String, rcgen::Error),
    #[error("creating a certificate: {0}")]
    Cert(#[from] rcgen::Error),
}

pub fn run(cmd: TlsCmd) -> anyhow::Result<()> {
    match cmd {
        TlsCmd::Init(opts) => {
            let written = init(&opts)?;
            println!("wrote {} files to {}:", written.len(), opts.dir.display());
            for f in written {
                println!("  {}", f.display());
            }
            let dir = opts.dir.display();
            println!(
                "\nserve with:  cluster serve --tls-ca {dir}/ca.pem --tls-cert {dir}/server.pem \
                 --tls-key {dir}/server.key --acl-token-file {dir}/token ..."
            );
            println!(
                "call with:   export STAMPEDE_TLS_CA={dir}/ca.pem STAMPEDE_TLS_CERT={dir}/operator.pem \
                 STAMPEDE_TLS_KEY={dir}/operator.key STAMPEDE_TOKEN=$(cat {dir}/token)"
            );
            Ok(())
        }
    }
}

/// Writes the CA, the three role certificates and the token; returns the
/// files written.
pub fn init(opts: &InitOpts) -> Result<Vec<PathBuf>, TlsInitError> {
    let dir = &opts.dir;
    let mut files = vec![
        dir.join(CA_FILE),
        dir.join(CA_KEY_FILE),
        dir.join(TOKEN_FILE),
    ];
    for role in Role::ALL {
        files.push(dir.join(format!("{}.pem", role.file_stem())));
        files.push(dir.join(format!("{}.key", role.file_stem())));
    }
    if !opts.force {
        if let Some(f) = files.iter().find(|f| f.symlink_metadata().is_ok()) {
            return Err(TlsInitError::Exists(f.clone()));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| TlsInitError::Write(dir.clone(), e))?;

    let now = OffsetDateTime::now_utc();
    let until = now + Duration::days(365 * i64::from(opts.years));
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "stampede cluster CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (ca.not_before, ca.not_after) = (now - Duration::hours(1), until);
    let ca_cert = ca.self_signed(&ca_key)?;
    write(&dir.join(CA_FILE), ca_cert.pem().as_bytes(), false)?;
    write(
        &dir.join(CA_KEY_FILE),
        ca_key.serialize_pem().as_bytes(),
        true,
    )?;

    for role in Role::ALL {
        let mut names = vec![SanType::DnsName(role.dns_name().try_into()?)];
        if role == Role::Server {
            names.push(SanType::DnsName("localhost".try_into()?));
            names.push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
            for s in &opts.sans {
                names.push(san(s)?);
            }
        }
        let mut p = CertificateParams::default();
        p.subject_alt_names = names;
        p.distinguished_name
            .push(DnType::CommonName, format!("stampede {role}"));
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Servers are clients of each other too (raft, forwarded writes).
        p.extended_key_usages = match role {
            Role::Server => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        (p.not_before, p.not_after) = (now - Duration::hours(1), until);
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &ca_cert, &ca_key)?;
        let stem = role.file_stem();
        write(
            &dir.join(format!("{stem}.pem")),
            cert.pem().as_bytes(),
            false,
        )?;
        write(
            &dir.join(format!("{stem}.key")),
            key.serialize_pem().as_bytes(),
            true,
        )?;
    }
    let token = Acl::generate_management_token() + "\n";
    write(&dir.join(TOKEN_FILE), token.as_bytes(), true)?;
    Ok(files)
}

/// A `--san` value: an IP address or a DNS name.
fn san(s: &str) -> Result<SanType, TlsInitError> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    s.to_string()
        .try_into()
        .map(SanType::DnsName)
        .map_err(|e| TlsInitError::BadName(s.to_string(), e))
}

/// Writes a file; secrets are readable by their owner only. The bytes go
/// to a new file beside it (mode set at creation, never following a link),
/// are synced, and take its name with a rename: a file already there, or a
/// symlink planted in its place, is replaced, never written through, and
/// keeps none of its old permissions.
fn write(path: &Path, bytes: &[u8], secret: bool) -> Result<(), TlsInitError> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let err = |e| TlsInitError::Write(path.to_path_buf(), e);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mode = if secret { 0o600 } else { 0o644 };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tls-init-")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(err)?;
    // The umask may have narrowed the mode at creation; set it exactly.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    // The rename itself is durable once the directory is synced.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn force_writes_keys_owner_only_and_never_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "not a key").unwrap();
        let tls = dir.path().join("tls");
        std::fs::create_dir(&tls).unwrap();
        // A key left world-readable, and another planted as a symlink.
        std::fs::write(tls.join("server.key"), "old").unwrap();
        std::fs::set_permissions(
            tls.join("server.key"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, tls.join("ca.key")).unwrap();
        let opts = InitOpts {
            dir: tls.clone(),
            sans: vec![],
            years: 1,
            force: false,
        };
        assert!(matches!(init(&opts), Err(TlsInitError::Exists(_))));
        init(&InitOpts {
            force: true,
            ..opts
        })
        .unwrap();
        for key in [
            "server.key",
            "ca.key",
            "client.key",
            "operator.key",
            "token",
        ] {
            let meta = std::fs::symlink_metadata(tls.join(key)).unwrap();
            assert!(meta.is_file(), "{key} is a regular file");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{key}");
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "not a key");
        let ca = std::fs::metadata(tls.join(CA_FILE)).unwrap();
        assert_eq!(ca.permissions().mode() & 0o777, 0o644);
        let stray = std::fs::read_dir(&tls)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".tls-init-"))
            })
            .count();
        assert_eq!(stray, 0, "no temporary file is left behind");
    }
}
