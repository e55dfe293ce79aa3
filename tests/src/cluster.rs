//! A PostgreSQL cluster of the benchmark's own, configured the way production databases are:
//! `initdb`'s defaults (autovacuum on, fsync on, synchronous commit on, full page writes), on
//! its own port and data directory, started with the installed PostgreSQL's `pg_ctl` and
//! stopped and removed when dropped. PostgreSQL refuses to run as root: as root, it runs as the
//! `postgres` user.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::free_port;

/// A running cluster; stopped and its data directory removed when dropped.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

/// The installed PostgreSQL's binaries (Debian: `/usr/lib/postgresql/<major>/bin`; else the
/// directory `pg_config --bindir` names).
fn bin_dir() -> PathBuf {
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed under /usr/lib/postgresql")
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("an initdb")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs a PostgreSQL program, as `postgres` when this process is root.
fn run(bin: &Path, program: &str, args: &[&str]) {
    let program = bin.join(program);
    let mut command = if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(&program);
        command
    } else {
        Command::new(&program)
    };
    let output = command
        .args(args)
        .output()
        .expect("run a PostgreSQL program");
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Cluster {
    /// `initdb`, then `pg_ctl start` on a free port, listening on 127.0.0.1 only (trust auth:
    /// it is the benchmark's own, on loopback).
    pub fn start() -> Cluster {
        let bin = bin_dir();
        let dir =
            std::env::temp_dir().join(format!("settle-bench-pg-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("cluster directory");
        if is_root() {
            let status = Command::new("chown")
                .arg("postgres")
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown the cluster directory to postgres");
        }
        let data = dir.join("data");
        let data_text = data.display().to_string();
        run(
            &bin,
            "initdb",
            &[
                "-D",
                &data_text,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        let port = free_port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            dir.display()
        );
        let log = dir.join("server.log").display().to_string();
        run(
            &bin,
            "pg_ctl",
            &["-D", &data_text, "-l", &log, "-o", &options, "-w", "start"],
        );
        Cluster { dir, bin, port }
    }

    /// Its maintenance database, for [`crate::TestDb::create_on`].
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data").display().to_string();
        let stopped = std::panic::catch_unwind(|| {
            run(
                &self.bin,
                "pg_ctl",
                &["-D", &data, "-m", "fast", "-w", "stop"],
            )
        });
        if stopped.is_err() {
            eprintln!("could not stop the benchmark's cluster at {data}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
