//! TLS, and mTLS, on the gRPC listener (`[envoy.tls]`), with certificate
//! reload: the certificate, key and client CA files are read again every
//! second by the binary's poll ([`ServerTls::reload`]); a change that loads
//! is used for the next connections (those open keep theirs), and one that
//! does not is logged and the running certificate stays.
//!
//! With `client_ca`, every client must present a certificate signed by it
//! (mTLS). A TLS handshake must finish within [`HANDSHAKE_TIMEOUT`], and at
//! most [`MAX_HANDSHAKES`] run at once: a client that opens connections and
//! never finishes the handshake holds neither the accept loop nor memory
//! for long.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use sluice_policy::settle::{Settled, settled};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most TLS handshakes in progress at once; further connections wait
/// to be accepted.
pub const MAX_HANDSHAKES: usize = 256;

/// The files of `[envoy.tls]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
    /// With mTLS: the CA that signs client certificates, PEM.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{}: cannot read: {error}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// A file's contents are not usable.
    #[error("{}: {message}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The listener's TLS settings, replaced whole when the files change.
#[derive(Debug)]
pub struct ServerTls {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
    /// The files' contents the config was built from.
    loaded: Mutex<Vec<Vec<u8>>>,
    /// Contents that did not load: reported once, not at every poll.
    refused: Mutex<Option<Vec<Vec<u8>>>>,
    /// The last error reading the files, likewise.
    unreadable: Mutex<Option<String>>,
}

impl ServerTls {
    /// Loads the files.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let contents = read_all(&files)?;
        let config = build(&files, &contents)?;
        Ok(Self {
            files,
            config: ArcSwap::from_pointee(config),
            loaded: Mutex::new(contents),
            refused: Mutex::new(None),
            unreadable: Mutex::new(None),
        })
    }

    /// Reads the files again: `true` when they changed and the new ones
    /// are in use. Files that do not load leave the running ones in use
    /// (and are reported once: the same contents again answer `false`).
    /// Changed files are loaded only once they have stopped changing
    /// ([`settle`](sluice_policy::settle)): a certificate and its key are
    /// replaced one after the other, and a read between the two is left
    /// to the next poll, not refused. Blocks for the settling wait when
    /// something changed.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let contents = match read_all(&self.files) {
            Ok(c) => c,
            Err(e) => {
                // A file that stays unreadable is reported once.
                let text = e.to_string();
                let mut last = self.unreadable.lock();
                if last.as_deref() == Some(text.as_str()) {
                    return Ok(false);
                }
                *last = Some(text);
                return Err(e);
            }
        };
        *self.unreadable.lock() = None;
        if self.known(&contents) {
            return Ok(false);
        }
        let contents = match settled(|| read_all(&self.files).ok(), None, false) {
            Settled::Stable(Some(c)) if !self.known(&c) => c,
            _ => return Ok(false),
        };
        let mut loaded = self.loaded.lock();
        let config = match build(&self.files, &contents) {
            Ok(c) => c,
            Err(e) => {
                *self.refused.lock() = Some(contents);
                return Err(e);
            }
        };
        self.config.store(Arc::new(config));
        *loaded = contents;
        tracing::info!(cert = %self.files.cert.display(), "gRPC TLS certificate reloaded");
        Ok(true)
    }

    /// Whether these contents are in use, or were refused already.
    fn known(&self, contents: &Vec<Vec<u8>>) -> bool {
        *self.loaded.lock() == *contents || self.refused.lock().as_ref() == Some(contents)
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.load_full())
    }
}

/// The most bytes a certificate, key or CA file may hold (bundles included).
const MAX_PEM_BYTES: u64 = 1 << 20;

fn read_all(files: &TlsFiles) -> Result<Vec<Vec<u8>>, TlsError> {
    let read = |file: &Path| {
        sluice_policy::file_read::read_bytes(file, MAX_PEM_BYTES).map_err(|error| TlsError::Read {
            file: file.to_owned(),
            error,
        })
    };
    let mut out = vec![read(&files.cert)?, read(&files.key)?];
    if let Some(ca) = &files.client_ca {
        out.push(read(ca)?);
    }
    Ok(out)
}

/// A server config from the files' contents (cert, key, client CA).
fn build(files: &TlsFiles, contents: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let invalid = |file: &Path, message: String| TlsError::Invalid {
        file: file.to_owned(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&contents[0])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(&files.cert, format!("not a PEM certificate chain: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(&files.cert, "no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&contents[1])
        .map_err(|e| invalid(&files.key, format!("not a PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&files.cert, e.to_string()))?;
    let builder = match (&files.client_ca, contents.get(2)) {
        (Some(ca_file), Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert =
                    cert.map_err(|e| invalid(ca_file, format!("not a PEM certificate: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid(ca_file, e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid(ca_file, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| invalid(&files.key, format!("does not match the certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The connections of `listener`, each through a TLS handshake with the
/// certificate in use when it arrived. Handshakes that fail or time out are
/// dropped (logged at debug). Dead peers are found by the server's HTTP/2
/// pings (TLS connections get no TCP keepalive).
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsStream<TcpStream>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            // The server gone (shut down), the listener closes at once.
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, say: back off, do not spin.
                    tracing::warn!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "gRPC TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "gRPC TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
