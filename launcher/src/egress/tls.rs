//! The proxy's TLS: the server name of a tunnel's ClientHello (read with
//! rustls, the bytes kept to pass on), the per-server CA that terminates
//! TLS to hosts whose requests the proxy must see, and the client side that
//! connects on to the real host with normal verification.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use time::OffsetDateTime;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Most bytes read looking for a ClientHello.
const MAX_HELLO: usize = 64 * 1024;
/// How long a tunnel may take to send its ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a tunnel's first bytes until they hold a TLS ClientHello; returns
/// the bytes read (to pass on unchanged) and the server name it asks for.
/// Anything that is not a ClientHello is an error.
pub async fn client_hello(
    io: &mut (impl AsyncRead + Unpin),
) -> Result<(Vec<u8>, Option<String>), String> {
    let read = async {
        let mut acceptor = rustls::server::Acceptor::default();
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let n = io
                .read(&mut buf)
                .await
                .map_err(|e| format!("reading the TLS hello failed: {e}"))?;
            if n == 0 {
                return Err("the client closed before its TLS hello".to_owned());
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.len() > MAX_HELLO {
                return Err("no TLS hello in the first 64 KiB".to_owned());
            }
            let mut chunk = &buf[..n];
            while !chunk.is_empty() {
                acceptor
                    .read_tls(&mut chunk)
                    .map_err(|e| format!("not a TLS connection ({e})"))?;
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    let name = accepted.client_hello().server_name().map(str::to_owned);
                    return Ok((seen, name));
                }
                Ok(None) => {}
                Err((e, _)) => return Err(format!("not a TLS connection ({e})")),
            }
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| Err("no TLS hello within 10 s".to_owned()))
}

/// The server's CA and client configuration.
pub struct Tls {
    ca_key: KeyPair,
    ca: rcgen::Certificate,
    ca_pem: String,
    extra_roots_pem: String,
    client: Arc<ClientConfig>,
    /// Server configurations by host, made once each.
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl Tls {
    /// A fresh CA (its key only in memory), and a client trusting the host's
    /// roots and `extra_roots` (a PEM file).
    pub fn new(extra_roots: Option<&Path>) -> Result<Self, String> {
        let fail = |e: rcgen::Error| format!("cannot make the proxy's CA: {e}");
        let ca_key = KeyPair::generate().map_err(fail)?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            "nix-sandbox-mcp egress proxy (one server's jails only)",
        );
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(400);
        let ca = params.self_signed(&ca_key).map_err(fail)?;
        let ca_pem = ca.pem();

        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        let mut extra_roots_pem = String::new();
        if let Some(path) = extra_roots {
            extra_roots_pem = std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "NIX_SANDBOX_EGRESS_CA_ROOTS={}: {e} (fix the path or unset it)",
                    path.display()
                )
            })?;
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(extra_roots_pem.as_bytes()) {
                let cert = cert
                    .map_err(|e| format!("NIX_SANDBOX_EGRESS_CA_ROOTS={}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("NIX_SANDBOX_EGRESS_CA_ROOTS={}: {e}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!(
                    "NIX_SANDBOX_EGRESS_CA_ROOTS={}: no PEM certificate in it",
                    path.display()
                ));
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            ca_key,
            ca,
            ca_pem,
            extra_roots_pem,
            client: Arc::new(client),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn extra_roots_pem(&self) -> &str {
        &self.extra_roots_pem
    }

    /// The acceptor that terminates TLS for `host` with a certificate the
    /// CA signs for it.
    pub fn acceptor(&self, host: &str) -> Result<TlsAcceptor, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(TlsAcceptor::from(Arc::clone(config)));
        }
        let fail = |e: rcgen::Error| format!("cannot make a certificate for {host}: {e}");
        let key = KeyPair::generate().map_err(fail)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(fail)?;
        params.distinguished_name.push(DnType::CommonName, host);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(30);
        let leaf = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .map_err(fail)?;
        let chain = vec![leaf.der().clone(), self.ca.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("cannot use the certificate for {host}: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_owned(), Arc::clone(&config));
        Ok(TlsAcceptor::from(config))
    }

    /// TLS to the real `host` over `tcp`, verified against the roots.
    pub async fn connect(&self, host: &str, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        TlsConnector::from(Arc::clone(&self.client))
            .connect(name, tcp)
            .await
    }
}
