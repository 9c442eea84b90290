//! TLS to PostgreSQL over rustls, with libpq's meanings of the connection parameters, so that a
//! state database across a network is not read (or spoken for) in the clear.
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` and refuses the other parameters, so
//! [`split`] takes libpq's TLS parameters out of the URL and builds the connector from them:
//!
//! - `disable`: never TLS; `prefer` (the default, as libpq's): TLS when the server offers it;
//!   `require`: TLS or no connection. Neither checks the server's certificate (libpq's meaning:
//!   encryption against a reader of the wire), unless a root certificate is given
//!   (`sslrootcert`, or `~/.postgresql/root.crt` exists), when `require` is `verify-ca`.
//! - `verify-ca`: the certificate must chain to a root of `sslrootcert` (a PEM file; default
//!   `~/.postgresql/root.crt`, and without either the connection is refused, as libpq does);
//!   `verify-full`: that, and the certificate must name the host slate connected to.
//!   `sslrootcert=system` (the system's public roots) only with `verify-full` (its default
//!   then): any publicly trusted certificate chains to those, so without the name check it
//!   would prove nothing (libpq refuses it too).
//! - `sslcert` and `sslkey` (PEM files): a client certificate for servers that ask for one.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// What `sslmode` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, String> {
        Ok(match s {
            "disable" => Mode::Disable,
            // libpq's `allow` tries without TLS first; slate's nearest is prefer
            "allow" | "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                ))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: it negotiates, the connector checks.
    fn driver(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            _ => "require",
        }
    }
}

/// The TLS parameters of a connection URL.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params {
    pub mode: Option<Mode>,
    pub root_cert: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// Takes libpq's TLS parameters out of `url`: the URL left for tokio-postgres (its `sslmode`
/// one it knows) and the parameters. Errors name the parameter.
pub fn strip(url: &str) -> Result<(String, Params), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), Params::default()));
    };
    let mut p = Params::default();
    let mut kept = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let value = || percent_decode(v);
        match k {
            "sslmode" => p.mode = Some(Mode::parse(&value())?),
            "sslrootcert" => p.root_cert = Some(value()),
            "sslcert" => p.cert = Some(value()),
            "sslkey" => p.key = Some(value()),
            _ => kept.push(kv.to_string()),
        }
    }
    if let Some(m) = p.mode {
        kept.push(format!("sslmode={}", m.driver()));
    }
    Ok(match kept.is_empty() {
        true => (base.to_string(), p),
        false => (format!("{base}?{}", kept.join("&")), p),
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector for tokio-postgres and deadpool: rustls with the checks `Params` ask for.
#[derive(Clone)]
pub struct Connector {
    config: Arc<ClientConfig>,
}

impl Connector {
    pub fn new(p: &Params) -> Result<Connector, String> {
        Connector::with_home(p, std::env::var_os("HOME").map(PathBuf::from))
    }

    /// [`Connector::new`] with the home folder where `.postgresql/root.crt` is looked for.
    fn with_home(p: &Params, home: Option<PathBuf>) -> Result<Connector, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let system = p.root_cert.as_deref() == Some("system");
        let mode = match (p.mode, system) {
            (None, true) => Mode::VerifyFull,
            (Some(m), true) if m != Mode::VerifyFull => {
                return Err(format!(
                    "sslrootcert=system needs sslmode=verify-full (not {}): any publicly \
                     trusted certificate chains to the system's roots, only the name check \
                     tells the server apart",
                    m.name()
                ))
            }
            (m, _) => m.unwrap_or(Mode::Prefer),
        };
        let home_root = home.map(|h| h.join(".postgresql/root.crt"));
        let default_root = home_root.clone().filter(|f| f.is_file());
        let roots = match (&p.root_cert, mode) {
            (Some(r), _) => Some(roots_of(Some(r))?),
            (None, _) if default_root.is_some() => {
                Some(roots_of(default_root.as_deref().and_then(Path::to_str))?)
            }
            (None, Mode::VerifyCa | Mode::VerifyFull) => {
                return Err(format!(
                    "sslmode={} needs a root certificate: give sslrootcert=FILE, put it in {}, \
                     or use sslrootcert=system with verify-full",
                    mode.name(),
                    home_root
                        .map(|h| h.display().to_string())
                        .unwrap_or_else(|| "~/.postgresql/root.crt".into())
                ))
            }
            (None, _) => None,
        };
        let chain = match roots {
            None => None,
            Some(roots) => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("sslrootcert: {e}"))?,
            ),
        };
        let verifier = Arc::new(Check {
            provider: provider.clone(),
            chain,
            name: mode == Mode::VerifyFull,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("internal: TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&p.cert, &p.key) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("sslcert {cert}: {e}"))?;
                let key_der =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| format!("sslkey {key}: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| format!("sslcert {cert} with sslkey {key}: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("sslcert and sslkey go together: give both or neither".into()),
        };
        Ok(Connector {
            config: Arc::new(config),
        })
    }
}

/// The roots in the PEM file `file`, or the system's (`None` or `system`).
fn roots_of(file: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match file {
        Some(f) if f != "system" => {
            let certs = CertificateDer::pem_file_iter(f)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert {f}: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("sslrootcert {f}: no certificate in it"));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(
                    "sslrootcert=system: the system has no root certificates; give sslrootcert=FILE"
                        .into(),
                );
            }
        }
    }
    Ok(roots)
}

/// What is checked of the server's certificate: nothing (libpq's `prefer` and `require`
/// without a root certificate: encryption only), its chain to a root (`verify-ca`), or its
/// chain and its name (`verify-full`). The handshake's signatures are checked in every case.
#[derive(Debug)]
struct Check {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    name: bool,
}

impl ServerCertVerifier for Check {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, host: &str) -> io::Result<Connect> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("host {host}: {e}"))
        })?;
        Ok(Connect {
            config: self.config.clone(),
            name,
        })
    }
}

/// One connection's handshake.
pub struct Connect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move {
            let tls = connector.connect(self.name, stream).await?;
            Ok(Stream(Box::new(tls)))
        })
    }
}

/// A TLS connection to the server.
pub struct Stream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM without channel binding (tokio-postgres' default is to prefer, not require it)
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_tokio_postgres_reads() {
        let cases: &[(&str, &str, Params)] = &[
            ("postgres://u@h/db", "postgres://u@h/db", Params::default()),
            (
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
                "postgres://u@h/db?application_name=x&sslmode=require",
                Params {
                    mode: Some(Mode::VerifyFull),
                    root_cert: Some("/etc/ca.pem".into()),
                    ..Default::default()
                },
            ),
            (
                "postgres://u@h/db?sslmode=disable",
                "postgres://u@h/db?sslmode=disable",
                Params {
                    mode: Some(Mode::Disable),
                    ..Default::default()
                },
            ),
            (
                "postgres://u@h/db?sslcert=c.pem&sslkey=k.pem&sslmode=verify-ca",
                "postgres://u@h/db?sslmode=require",
                Params {
                    mode: Some(Mode::VerifyCa),
                    cert: Some("c.pem".into()),
                    key: Some("k.pem".into()),
                    ..Default::default()
                },
            ),
        ];
        for (url, left, params) in cases {
            assert_eq!(
                strip(url).as_ref(),
                Ok(&(left.to_string(), params.clone())),
                "{url}"
            );
        }
        let err = strip("postgres://h/db?sslmode=verify").unwrap_err();
        assert!(err.contains("sslmode=verify"), "{err}");
    }

    /// Each sslmode against the test server, which offers TLS with a certificate for
    /// `localhost` signed by tests/keys/test-only-pg-ca.pem: what connects, encrypted or not,
    /// and what is refused with a line that says why.
    #[test]
    fn each_sslmode_against_a_server_with_tls() {
        use crate::state::db::{testing::PgDatabase, Db, Location};
        let db = PgDatabase::new();
        let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keys");
        let (ca, other) = (
            format!("{keys}/test-only-pg-ca.pem"),
            format!("{keys}/test-only-pg-other-ca.pem"),
        );
        let by_name = db.url.replace("@127.0.0.1:", "@localhost:");
        let tls = |url: String| -> Result<i64, String> {
            let d = Db::open(&Location::Postgres(url)).map_err(|e| e.to_string())?;
            d.read(|c| {
                c.query_row(
                    "SELECT CAST(CASE WHEN ssl THEN 1 ELSE 0 END AS BIGINT) FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                    |r| r.get(0),
                )
            })
            .map_err(|e| e.to_string())
        };
        let u = &db.url;
        assert_eq!(tls(format!("{u}?sslmode=disable")), Ok(0));
        assert_eq!(
            tls(u.clone()),
            Ok(1),
            "prefer (the default) takes the TLS offered"
        );
        assert_eq!(tls(format!("{u}?sslmode=require")), Ok(1));
        assert_eq!(
            tls(format!("{u}?sslmode=verify-ca&sslrootcert={ca}")),
            Ok(1)
        );
        assert_eq!(
            tls(format!("{by_name}?sslmode=verify-full&sslrootcert={ca}")),
            Ok(1)
        );
        let refused = [
            // the certificate names localhost, not 127.0.0.1
            (
                format!("{u}?sslmode=verify-full&sslrootcert={ca}"),
                "not valid for name",
            ),
            (
                format!("{by_name}?sslmode=verify-full&sslrootcert={other}"),
                "UnknownIssuer",
            ),
            // libpq's require with a root certificate checks the chain
            (
                format!("{u}?sslmode=require&sslrootcert={other}"),
                "UnknownIssuer",
            ),
        ];
        for (url, why) in refused {
            let err = tls(url.clone()).expect_err(&url);
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_files_are_named() {
        let p = Params {
            cert: Some("c.pem".into()),
            ..Default::default()
        };
        let err = Connector::new(&p).err().unwrap_or_default();
        assert!(err.contains("sslcert and sslkey"), "{err}");
        let p = Params {
            mode: Some(Mode::VerifyFull),
            root_cert: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = Connector::new(&p).err().unwrap_or_default();
        assert!(err.contains("sslrootcert /nonexistent/ca.pem"), "{err}");
        // libpq's refusals: a verifying mode with no root to verify against, and the system's
        // public roots without the name check
        let home = tempfile::tempdir().unwrap();
        let refusals = [
            (Some(Mode::VerifyCa), None, "needs a root certificate"),
            (Some(Mode::VerifyFull), None, "needs a root certificate"),
            (
                Some(Mode::VerifyCa),
                Some("system"),
                "needs sslmode=verify-full",
            ),
            (
                Some(Mode::Require),
                Some("system"),
                "needs sslmode=verify-full",
            ),
        ];
        let results: Vec<String> = refusals
            .iter()
            .map(|(mode, root, _)| {
                Connector::with_home(
                    &Params {
                        mode: *mode,
                        root_cert: root.map(str::to_string),
                        ..Default::default()
                    },
                    Some(home.path().to_path_buf()),
                )
                .err()
                .unwrap_or_default()
            })
            .collect();
        // system roots with verify-full (given or by default) are taken
        let full = Connector::with_home(
            &Params {
                root_cert: Some("system".into()),
                ..Default::default()
            },
            Some(home.path().to_path_buf()),
        );
        for ((mode, root, why), err) in refusals.iter().zip(&results) {
            assert!(err.contains(why), "{mode:?} {root:?}: {err}");
        }
        // (a machine without a CA bundle says so instead)
        match full {
            Ok(_) => {}
            Err(e) => assert!(e.contains("has no root certificates"), "{e}"),
        }
    }
}
