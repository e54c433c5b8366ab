//! An accepted connection and who is on the other end: the TLS handshake
//! (when the server has TLS) checks the caller's certificate against the
//! cluster CA, and the role its certificate names is read once here, for
//! every request on the connection to be authorised by (in `auth`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use stampede_proto::security::{Role, TlsMaterial};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// How long a new connection may take over its TLS handshake.
pub const HANDSHAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Who called: what the connection's handshake established.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub addr: Option<SocketAddr>,
    /// The role the caller's certificate names; `None` without TLS.
    pub role: Option<Role>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("--tls-ca: {0}")]
    Ca(String),
    #[error("--tls-cert/--tls-key: {0}")]
    Identity(String),
}

/// The server's TLS: its certificate, and client certificates required and
/// checked against the cluster CA.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

impl ServerTls {
    pub fn new(m: &TlsMaterial) -> Result<Self, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut &m.ca[..]) {
            let cert = cert.map_err(|e| TlsSetupError::Ca(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| TlsSetupError::Ca(e.to_string()))?;
        }
        // A caller without a certificate gets through the handshake and is
        // refused call by call (`Unauthenticated`, naming what it lacks); a
        // certificate the CA did not sign fails the handshake.
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsSetupError::Ca(e.to_string()))?;
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &m.cert[..])
            .collect::<Result<_, _>>()
            .map_err(|e| TlsSetupError::Identity(e.to_string()))?;
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &m.key[..])
            .map_err(|e| TlsSetupError::Identity(e.to_string()))?
            .ok_or_else(|| TlsSetupError::Identity("no private key in --tls-key".into()))?;
        if certs.first().and_then(|c| role_of(c)) != Some(Role::Server) {
            return Err(TlsSetupError::Identity(format!(
                "the certificate does not name the server role ({})",
                Role::Server.dns_name()
            )));
        }
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Identity(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|e| TlsSetupError::Identity(e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// The role named by a certificate's subject alternative names, if any.
pub fn role_of(cert: &[u8]) -> Option<Role> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        x509_parser::extensions::GeneralName::DNSName(d) => Role::from_dns_name(d),
        _ => None,
    })
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A connection, plain or TLS, with what its handshake established.
pub struct Conn {
    io: Box<dyn Io>,
    pub info: PeerInfo,
}

impl Conn {
    /// Completes the handshake of an accepted connection (nothing to do
    /// without TLS); a caller silent for `HANDSHAKE_WAIT` is dropped.
    pub async fn accept(stream: TcpStream, tls: Option<&ServerTls>) -> io::Result<Conn> {
        tokio::time::timeout(HANDSHAKE_WAIT, Self::handshake(stream, tls))
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {HANDSHAKE_WAIT:?}"),
                ))
            })
    }

    async fn handshake(stream: TcpStream, tls: Option<&ServerTls>) -> io::Result<Conn> {
        let addr = stream.peer_addr().ok();
        let Some(tls) = tls else {
            return Ok(Conn {
                io: Box::new(stream),
                info: PeerInfo { addr, role: None },
            });
        };
        let stream = tls.acceptor.accept(stream).await?;
        let role = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|c| role_of(c));
        Ok(Conn {
            io: Box::new(stream),
            info: PeerInfo { addr, role },
        })
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = PeerInfo;
    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
