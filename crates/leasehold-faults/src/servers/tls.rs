//! A throwaway certificate authority and a server certificate signed by it, made with the
//! `openssl` command at test time, for servers that speak TLS.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ServerError, TempDir, io, run, which};

/// A CA, a server certificate for `localhost` and `127.0.0.1` signed by it, its key, and a
/// second, unrelated CA (which must not verify the server). Removed when dropped.
#[derive(Debug)]
pub struct TlsFiles {
    dir: TempDir,
}

impl TlsFiles {
    /// Makes the files (P-256 keys, valid for two days).
    ///
    /// # Errors
    /// [`ServerError::Missing`] without `openssl`; its output when a step fails.
    pub fn generate() -> Result<Self, ServerError> {
        let openssl = which("openssl", "openssl")?;
        let files = Self {
            dir: TempDir::new("tls")?,
        };
        let d = files.dir.path();
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(io("write server.ext"))?;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (ca, cn) in [
            ("ca", "leasehold test CA"),
            ("other-ca", "unrelated test CA"),
        ] {
            run(Command::new(&openssl)
                .current_dir(d)
                .args(["req", "-x509"])
                .args(ec)
                .args([
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.pem"),
                ])
                .args(["-days", "2", "-subj", &format!("/CN={cn}")])
                .args(["-addext", "basicConstraints=critical,CA:TRUE"])
                .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]))?;
        }
        run(Command::new(&openssl)
            .current_dir(d)
            .arg("req")
            .args(ec)
            .args(["-keyout", "server.key", "-out", "server.csr"])
            .args(["-subj", "/CN=localhost"]))?;
        run(Command::new(&openssl)
            .current_dir(d)
            .args(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem"])
            .args(["-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem"])
            .args(["-days", "2", "-extfile", "server.ext"]))?;
        Ok(files)
    }

    /// The directory holding the files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate that signed the server's (PEM).
    #[must_use]
    pub fn ca(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// A CA certificate that did not sign the server's (PEM).
    #[must_use]
    pub fn other_ca(&self) -> PathBuf {
        self.dir().join("other-ca.pem")
    }

    /// The server certificate (PEM).
    #[must_use]
    pub fn server_cert(&self) -> PathBuf {
        self.dir().join("server.pem")
    }

    /// The server's private key (PEM).
    #[must_use]
    pub fn server_key(&self) -> PathBuf {
        self.dir().join("server.key")
    }
}
