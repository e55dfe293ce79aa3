//! The real `settle` binary as separate processes, for fleet and chaos tests.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use tokio::process::{Child, Command};

/// Builds (once per test process) and returns the `settle` binary of this build profile.
pub fn settle_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable");
        // target/<profile>/deps/<test binary>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("profile dir")
            .to_owned();
        let target_dir = profile_dir.parent().expect("target dir").to_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        // The same selection as the test build (every target of the workspace), so features
        // unify the same way and neither build invalidates the other's artifacts.
        build
            .args([
                "build",
                "--quiet",
                "--workspace",
                "--all-targets",
                "--target-dir",
            ])
            .arg(&target_dir);
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        // Cargo sets these for the test or bench being run; a build script that reads one (ring's
        // reads CARGO_MANIFEST_DIR) would see it change between this build and the outer one,
        // and each would rebuild everything that depends on it.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_MANIFEST_")
                || matches!(
                    name.as_ref(),
                    "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                )
            {
                build.env_remove(name.as_ref());
            }
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build of settle failed");
        profile_dir.join("settle")
    })
}

/// `settle` as a child process; see [`command_without_harness_env`].
pub fn settle_command() -> Command {
    command_without_harness_env(settle_binary())
}

/// A child process (settle itself, or a wrapper that runs it) without the harness' own variables
/// (`SETTLE_TEST_*`): settle reads every `SETTLE_*` variable as configuration and refuses unknown
/// ones.
pub fn command_without_harness_env(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SETTLE_TEST_") {
            command.env_remove(name);
        }
    }
    command
}

/// A scratch directory for a fleet's config and logs, removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("settle-test-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch { dir }
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).expect("write scratch file");
        path
    }

    /// Everything the processes logged, for failure messages and log checks.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                if entry.path().extension().is_some_and(|ext| ext == "log") {
                    all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                }
            }
        }
        all
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Keep the processes' logs for the run's log check.
        if let Some(collected) = crate::logs::dir()
            && let Ok(entries) = std::fs::read_dir(&self.dir)
        {
            for entry in entries.flatten() {
                if entry.path().extension().is_some_and(|ext| ext == "log") {
                    let name = format!(
                        "{}-{}",
                        self.dir
                            .file_name()
                            .and_then(|n| n.to_str())
                            .unwrap_or("scratch"),
                        entry.file_name().to_string_lossy()
                    );
                    let _ = std::fs::copy(entry.path(), collected.join(name));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `settle <args>` with `config`, the database URL and extra environment; its stderr
/// goes to `<scratch>/<log_name>.log`. Killed when dropped.
pub fn spawn_settle(
    scratch: &Scratch,
    log_name: &str,
    config: &Path,
    database_url: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scratch.dir.join(format!("{log_name}.log")))
        .expect("log file");
    let mut command = settle_command();
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "info,sqlx::postgres::notice=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("start settle")
}

/// Starts `settle <args>` in `scratch` (its working directory) with only the environment given:
/// no `DATABASE_URL`, so settle uses its embedded default there. Killed when dropped.
pub fn spawn_settle_in(
    scratch: &Scratch,
    log_name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scratch.dir.join(format!("{log_name}.log")))
        .expect("log file");
    let mut command = settle_command();
    command
        .args(args)
        .current_dir(&scratch.dir)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("start settle")
}

/// Runs `settle <args>` to completion; returns (exit success, stdout).
pub async fn run_settle(config: &Path, database_url: &str, args: &[&str]) -> (bool, String) {
    let output = settle_command()
        .arg("--config")
        .arg(config)
        .args(args)
        .env("DATABASE_URL", database_url)
        .output()
        .await
        .expect("run settle");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Sends SIGTERM to `child` (a graceful stop); panics if it cannot be sent.
pub fn sigterm(child: &Child) {
    let pid = child.id().expect("a running child").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success(), "SIGTERM to {pid}");
}

/// A PgBouncer in transaction mode in front of the suite's PostgreSQL, on its own port, for as
/// long as it lives. PgBouncer refuses to run as root, so it runs as `postgres` when we are root.
#[derive(Debug)]
pub struct TransactionPooler {
    pub port: u16,
    child: Child,
    _scratch: Scratch,
}

impl TransactionPooler {
    pub async fn start() -> TransactionPooler {
        let scratch = Scratch::new();
        let port = free_port();
        let ini = scratch.write(
            "pgbouncer.ini",
            &format!(
                "[databases]\n* = host=127.0.0.1 port=5432\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n\
                 auth_file = {users}\npool_mode = transaction\nunix_socket_dir =\n\
                 ignore_startup_parameters = extra_float_digits,application_name\n\
                 pidfile = {pidfile}\n",
                users = scratch.dir.join("users.txt").display(),
                pidfile = scratch.dir.join("pgbouncer.pid").display(),
            ),
        );
        // The owner, and the worker's login role (a fleet's worker connects as its runtime role).
        scratch.write("users.txt", "\"postgres\" \"\"\n\"settle_t_worker\" \"\"\n");
        let as_root = std::env::var("USER").map(|u| u == "root").unwrap_or(true);
        let mut command = if as_root {
            let _ = std::process::Command::new("chmod")
                .arg("-R")
                .arg("a+rwX")
                .arg(&scratch.dir)
                .status();
            let mut command = Command::new("runuser");
            command
                .args(["-u", "postgres", "--", "pgbouncer"])
                .arg(&ini);
            command
        } else {
            let mut command = Command::new("pgbouncer");
            command.arg(&ini);
            command
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start pgbouncer (is it installed? .ci/run installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return TransactionPooler {
                    port,
                    child,
                    _scratch: scratch,
                };
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("pgbouncer did not start on port {port}");
    }

    /// `url` (a database on the suite's server) rewritten to go through the pooler.
    pub fn url_for(&self, url: &str) -> String {
        url.replacen("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port), 1)
    }
}

impl Drop for TransactionPooler {
    fn drop(&mut self) {
        // runuser forks: stop PgBouncer itself by its pid file, then the wrapper.
        if let Ok(pid) = std::fs::read_to_string(self._scratch.dir.join("pgbouncer.pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
        let _ = self.child.start_kill();
    }
}

/// The two listeners of a `settle` process a test starts, on free loopback ports.
#[derive(Clone, Debug)]
pub struct Listen {
    /// `--listen`: webhooks and `/healthz`.
    pub public: String,
    /// `--ops-listen`: the API, the dashboard, `/metrics` and `/readyz`.
    pub ops: String,
}

impl Listen {
    pub fn new() -> Self {
        Self {
            public: format!("127.0.0.1:{}", free_port()),
            ops: format!("127.0.0.1:{}", free_port()),
        }
    }

    /// `role --listen ... --ops-listen ...`.
    pub fn args<'a>(&'a self, role: &'a str) -> [&'a str; 5] {
        [role, "--listen", &self.public, "--ops-listen", &self.ops]
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.public)
    }

    pub fn ops_base(&self) -> String {
        format!("http://{}", self.ops)
    }
}

impl Default for Listen {
    fn default() -> Self {
        Self::new()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}
