//! TLS for the admin server: a certificate and key from PEM files, read
//! again when they change (cert-manager and the kubelet replace a mounted
//! Secret's files in place), or a self-signed certificate made at start.
//!
//! The certificate is chosen per handshake by [`Certificates`], so a reload
//! takes effect for the next connection and never interrupts one in flight.
//! A reload that fails (a half-written file, a key that does not match, a
//! file deleted or unreadable) keeps the certificate in use and is counted
//! on every look; the log says it once per episode ([`ReloadLog`]): a
//! warning when the looks start failing or the cause changes, and one
//! line with the number of failed looks when the files are usable again.
//! The next good content replaces the certificate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("--tls-cert-file {0}: no PEM certificate in it")]
    NoCertificate(PathBuf),
    /// The key file holds no PEM private key.
    #[error("--tls-key-file {0}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)")]
    NoKey(PathBuf),
    /// rustls refused the key, or the key does not belong to the certificate.
    #[error("--tls-key-file {path} with --tls-cert-file {cert}: {source}")]
    Unusable {
        /// The key file.
        path: PathBuf,
        /// The certificate file.
        cert: PathBuf,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
    /// The self-signed certificate could not be made.
    #[error("cannot make a self-signed certificate: {0}")]
    Generate(String),
    /// The TLS settings could not be built.
    #[error("TLS settings: {0}")]
    Config(#[source] rustls::Error),
}

/// Where the certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// PEM files, watched for changes.
    Files {
        /// `--tls-cert-file`: the certificate chain, leaf first.
        cert: PathBuf,
        /// `--tls-key-file`: the private key.
        key: PathBuf,
    },
    /// A certificate for `localhost` and the given names, made at start and
    /// kept for the life of the process (a scraper must skip verification
    /// or pin it; see docs/decisions/endpoint-security.md).
    SelfSigned {
        /// Subject alternative names besides `localhost`.
        names: Vec<String>,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Files { cert, key } => write!(
                f,
                "certificate {} and key {}, read again when they change",
                cert.display(),
                key.display()
            ),
            Source::SelfSigned { .. } => {
                f.write_str("a self-signed certificate made at start (no --tls-cert-file)")
            }
        }
    }
}

/// The certificate served, replaceable while the server runs.
#[derive(Debug)]
pub struct Certificates {
    current: RwLock<Arc<CertifiedKey>>,
    /// The file contents the current certificate was made from (files only).
    loaded: RwLock<Option<(Vec<u8>, Vec<u8>)>>,
    /// The contents that last failed, so a bad file is logged once.
    failed: RwLock<Option<(Vec<u8>, Vec<u8>)>>,
    provider: Arc<CryptoProvider>,
    source: Source,
}

/// What one look at the files found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The files are as they were.
    Unchanged,
    /// A new certificate is served from now on.
    Replaced,
    /// The files changed but cannot be used; the old certificate stays.
    Failed,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Certificates {
    /// Loads the certificate once; a bad file fails here, naming its flag.
    pub fn load(source: Source) -> Result<Arc<Certificates>, TlsError> {
        let provider = provider();
        let (key, loaded) = match &source {
            Source::Files { cert, key } => {
                let (c, k) = read_pair(cert, key)?;
                (certified(&provider, cert, key, &c, &k)?, Some((c, k)))
            }
            Source::SelfSigned { names } => (self_signed(&provider, names)?, None),
        };
        Ok(Arc::new(Certificates {
            current: RwLock::new(Arc::new(key)),
            loaded: RwLock::new(loaded),
            failed: RwLock::new(None),
            provider,
            source,
        }))
    }

    /// Where the certificate comes from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The certificate served now (DER of the leaf).
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        read_lock(&self.current).cert.first().cloned()
    }

    /// Reads the files again and swaps the certificate when they changed
    /// and are usable. A self-signed certificate never changes.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let Source::Files { cert, key } = &self.source else {
            return Ok(Reload::Unchanged);
        };
        let pair = match read_pair(cert, key) {
            Ok(pair) => pair,
            Err(err) => {
                // Bad content seen before this is news again when it
                // comes back: a change of cause.
                self.forget_failed();
                return Err(err);
            }
        };
        if read_lock(&self.loaded).as_ref() == Some(&pair) {
            self.forget_failed();
            return Ok(Reload::Unchanged);
        }
        match certified(&self.provider, cert, key, &pair.0, &pair.1) {
            Ok(fresh) => {
                *write_lock(&self.current) = Arc::new(fresh);
                *write_lock(&self.loaded) = Some(pair);
                *write_lock(&self.failed) = None;
                Ok(Reload::Replaced)
            }
            Err(err) => {
                let mut failed = write_lock(&self.failed);
                if failed.as_ref() == Some(&pair) {
                    return Ok(Reload::Failed);
                }
                *failed = Some(pair);
                Err(err)
            }
        }
    }

    fn forget_failed(&self) {
        if read_lock(&self.failed).is_some() {
            *write_lock(&self.failed) = None;
        }
    }

    /// The rustls settings: TLS 1.2 and 1.3 only (rustls knows no older
    /// version), HTTP/1.1 by ALPN, the certificate chosen per handshake.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Looks at the files every `every` for as long as the server runs;
    /// logs each replacement, and failed looks once per episode
    /// ([`ReloadLog`]); counts replacements and every failed look through
    /// `counted`.
    pub async fn watch(self: Arc<Self>, every: Duration, counted: impl Fn(Reload) + Send) {
        if !matches!(self.source, Source::Files { .. }) {
            return std::future::pending().await;
        }
        let mut log = ReloadLog::default();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let this = self.clone();
            // File reads block; keep them off the reactor.
            let result = tokio::task::spawn_blocking(move || this.reload()).await;
            let outcome = match result {
                Ok(Ok(reload)) => Ok(reload),
                Ok(Err(err)) => Err(err.to_string()),
                Err(err) => Err(format!("the look at the files failed: {err}")),
            };
            match log.looked(outcome) {
                Reload::Unchanged => {}
                Reload::Replaced => {
                    tracing::info!(source = %self.source, "TLS certificate replaced; new connections get it");
                    counted(Reload::Replaced);
                }
                Reload::Failed => counted(Reload::Failed),
            }
        }
    }
}

/// What the log has said about failed looks at the files: a warning when
/// they start failing and when the cause changes (a file deleted, then
/// back with a key that does not match), then nothing per look, and one
/// line with the number of failed looks when a look succeeds again.
#[derive(Debug, Default)]
struct ReloadLog {
    failed: super::episode::Episode,
    /// The last cause logged.
    cause: Option<String>,
}

impl ReloadLog {
    /// Logs what one look found, as the episode has it; returns what to
    /// count. `Err` is a failed look with its cause; `Ok(Reload::Failed)`
    /// is the same bad content as the look before (its cause logged).
    fn looked(&mut self, outcome: Result<Reload, String>) -> Reload {
        match outcome {
            Ok(Reload::Failed) => {
                self.failed.on_error();
                Reload::Failed
            }
            Err(cause) => {
                let first = self.failed.on_error();
                if first || self.cause.as_deref() != Some(cause.as_str()) {
                    tracing::warn!(error = %cause, "TLS certificate files cannot be used; still serving the previous certificate. Every failed look (one each 10 s) is counted in tls_reloads_total{{result=\"error\"}}; the log says it again when the cause changes, and how many looks failed when the files are usable again");
                }
                self.cause = Some(cause);
                Reload::Failed
            }
            Ok(fine) => {
                self.cause = None;
                if let Some(failed_looks) = self.failed.on_success() {
                    tracing::info!(failed_looks, "TLS certificate files usable again");
                }
                fine
            }
        }
    }
}

#[derive(Debug)]
struct Resolver(Arc<Certificates>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(read_lock(&self.0.current).clone())
    }
}

fn read_lock<T: Clone>(l: &RwLock<T>) -> T {
    match l.read() {
        Ok(g) => g.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    match l.write() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |flag, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            flag,
            path: path.to_owned(),
            source,
        })
    };
    Ok((read("--tls-cert-file", cert)?, read("--tls-key-file", key)?))
}

fn certified(
    provider: &CryptoProvider,
    cert_path: &Path,
    key_path: &Path,
    cert: &[u8],
    key: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.to_owned()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key).map_err(|_| TlsError::NoKey(key_path.to_owned()))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Unusable {
        path: key_path.to_owned(),
        cert: cert_path.to_owned(),
        source,
    })
}

fn self_signed(provider: &CryptoProvider, names: &[String]) -> Result<CertifiedKey, TlsError> {
    let mut all = vec!["localhost".to_string()];
    all.extend(names.iter().filter(|n| !n.is_empty()).cloned());
    let made =
        rcgen::generate_simple_self_signed(all).map_err(|e| TlsError::Generate(e.to_string()))?;
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    CertifiedKey::from_der(vec![made.cert.der().clone()], key, provider)
        .map_err(|e| TlsError::Generate(e.to_string()))
}

#[cfg(test)]
mod tests;
