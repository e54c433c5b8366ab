//! An accepted connection and who is on the other end: the TLS handshake
//! (when the server has TLS) checks the caller's certificate against the
//! cluster CA, and the role its certificate names is read once here, for
//! every request on the connection to be authorised by (in `auth`). Each
//! connection holds its place under the connection caps ([`Permit`]) and
//! is closed once it has had no request in flight for its idle timeout
//! ([`Activity`]): the header timeout before its first request, or for a
//! caller without a certificate under TLS, who can do nothing but be refused.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use stampede_proto::security::{Role, TlsMaterial};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;

use super::limits::Permit;

/// Who called: what the connection's handshake established.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub addr: Option<SocketAddr>,
    /// The role the caller's certificate names; `None` without TLS.
    pub role: Option<Role>,
    /// The connection's requests in flight, for its idle timeout.
    pub activity: Arc<Activity>,
}

impl PeerInfo {
    pub fn new(addr: Option<SocketAddr>, role: Option<Role>) -> Self {
        Self {
            addr,
            role,
            activity: Arc::default(),
        }
    }
}

/// A connection's requests: how many are in flight and when the last one
/// began or ended. Every request holds an [`InFlight`] while it runs.
#[derive(Debug)]
pub struct Activity {
    since: Instant,
    in_flight: AtomicUsize,
    started: AtomicBool,
    /// Milliseconds from `since` to the last request's start or end.
    last_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            since: Instant::now(),
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// Marks a request begun; it ends when the guard drops.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
        self.touch();
        InFlight(self.clone())
    }

    fn touch(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// When the connection times out, given the timeouts before and after
    /// its first request; `None` while a request is in flight.
    fn deadline(&self, first: Duration, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let last = self.since + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let wait = if self.started.load(Ordering::Relaxed) {
            idle
        } else {
            first
        };
        Some(last + wait)
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A connection's timeouts, from [`super::EdgeLimits`].
#[derive(Debug, Clone, Copy)]
pub struct ConnTimeouts {
    pub handshake: Duration,
    /// Before the first request, and for a caller without a certificate.
    pub first: Duration,
    pub idle: Duration,
}

/// Closes a connection that has had no request in flight for too long:
/// checked whenever a read would wait.
struct IdleWatch {
    activity: Arc<Activity>,
    first: Duration,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl IdleWatch {
    /// `Ready(err)` once the connection has timed out, else `Pending` with
    /// a wake-up at its deadline.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            let now = tokio::time::Instant::now();
            let next = match self.activity.deadline(self.first, self.idle) {
                None => now + self.idle,
                Some(d) if d <= Instant::now() => {
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request in flight within the idle timeout",
                    ))
                }
                Some(d) => now + d.saturating_duration_since(Instant::now()),
            };
            self.sleep.as_mut().reset(next);
        }
    }
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
    watch: IdleWatch,
    _permit: Option<Permit>,
}

impl Conn {
    /// Completes the handshake of an accepted connection (nothing to do
    /// without TLS); a caller silent for `t.handshake` is dropped.
    pub async fn accept(
        stream: TcpStream,
        tls: Option<&ServerTls>,
        t: ConnTimeouts,
        permit: Option<Permit>,
    ) -> io::Result<Conn> {
        let (io, info) = tokio::time::timeout(t.handshake, Self::handshake(stream, tls))
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no TLS handshake within {:?} (--tls-handshake-timeout)",
                        t.handshake
                    ),
                ))
            })?;
        // Under TLS, a caller without a certificate is refused every call.
        let anonymous = tls.is_some() && info.role.is_none();
        let idle = if anonymous { t.first } else { t.idle };
        Ok(Conn {
            io,
            watch: IdleWatch {
                activity: info.activity.clone(),
                first: t.first,
                idle,
                sleep: Box::pin(tokio::time::sleep(t.first)),
            },
            info,
            _permit: permit,
        })
    }

    async fn handshake(
        stream: TcpStream,
        tls: Option<&ServerTls>,
    ) -> io::Result<(Box<dyn Io>, PeerInfo)> {
        let addr = stream.peer_addr().ok();
        let Some(tls) = tls else {
            return Ok((Box::new(stream), PeerInfo::new(addr, None)));
        };
        let stream = tls.acceptor.accept(stream).await?;
        let role = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|c| role_of(c));
        Ok((Box::new(stream), PeerInfo::new(addr, role)))
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
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if read.is_pending() {
            if let Poll::Ready(e) = self.watch.poll_expired(cx) {
                return Poll::Ready(Err(e));
            }
        }
        read
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
