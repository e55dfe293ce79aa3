//! A fleet of real `settle worker` processes over a test's PostgreSQL database, for the fleet
//! tests and the chaos suite: started, SIGKILLed, revived.

use futures::StreamExt;
use tokio::process::Child;

use crate::TestApp;
use crate::app::{AppOptions, charge, config_toml};
use crate::process::{Scratch, spawn_settle};

/// Records `count` distinct charge events (`<prefix><n>`) through the ingress, 32 at a time.
pub async fn record_charges(app: &TestApp, prefix: &str, count: usize) {
    let statuses: Vec<u16> = futures::stream::iter(0..count)
        .map(|i| async move {
            let body = charge(&format!("ch_{prefix}{i}"), "10.00", "0.30", "9.70");
            app.post_standard(&format!("{prefix}{i}"), &body)
                .await
                .status()
                .as_u16()
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|&s| s == 200),
        "every delivery recorded"
    );
}

#[derive(Debug)]
pub struct Fleet<'a> {
    scratch: &'a Scratch,
    pub config: std::path::PathBuf,
    url: String,
    env: Vec<(&'static str, String)>,
    pub members: Vec<Child>,
    starts: usize,
}

impl<'a> Fleet<'a> {
    /// A fleet over `app`'s database with `workers` as its `[workers]` table and `env` for every
    /// member; nothing is started yet.
    pub fn new(
        scratch: &'a Scratch,
        app: &TestApp,
        workers: &str,
        env: Vec<(&'static str, String)>,
    ) -> Self {
        let options = AppOptions {
            workers: workers.to_owned(),
            stripe: Some(app.stripe.clone()),
            ..AppOptions::default()
        };
        Self::with_options(scratch, app, &options, env)
    }

    /// A fleet over `app`'s database configured by `options` (its `[workers]` table, extra
    /// sources...), with `env` for every member; nothing is started yet.
    pub fn with_options(
        scratch: &'a Scratch,
        app: &TestApp,
        options: &AppOptions,
        env: Vec<(&'static str, String)>,
    ) -> Self {
        let config = scratch.write("settle.toml", &config_toml(&app.database_url(), options));
        // On PostgreSQL each member connects as a worker's runtime role (the app that made the
        // database granted them); it does not migrate.
        let (url, env) = match app.backend() {
            crate::app::Backend::Postgres => {
                let mut env = env;
                env.push(("SETTLE_MIGRATE_ON_START", "false".to_owned()));
                (
                    crate::db::as_role(&app.database_url(), "settle_worker"),
                    env,
                )
            }
            crate::app::Backend::Sqlite => (app.database_url(), env),
        };
        Fleet {
            scratch,
            config,
            url,
            env,
            members: Vec::new(),
            starts: 0,
        }
    }

    pub fn spawn_worker(&mut self) -> Child {
        self.starts += 1;
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spawn_settle(
            self.scratch,
            &format!("worker-{}", self.starts),
            &self.config,
            &self.url,
            &["worker"],
            &env,
        )
    }

    pub fn start(&mut self, count: usize) {
        for _ in 0..count {
            let child = self.spawn_worker();
            self.members.push(child);
        }
    }

    /// Restarts members that exited (a poisoned worker aborts itself).
    pub fn revive(&mut self) -> usize {
        let mut revived = 0;
        for i in 0..self.members.len() {
            if self.members[i].try_wait().ok().flatten().is_some() {
                self.members[i] = self.spawn_worker();
                revived += 1;
            }
        }
        revived
    }

    /// SIGKILLs member `index`, reaps it, and starts a fresh one in its place.
    pub async fn kill_and_restart(&mut self, index: usize) {
        let member = &mut self.members[index];
        member.start_kill().expect("SIGKILL");
        member.wait().await.expect("reaped");
        self.members[index] = self.spawn_worker();
    }
}

/// No event is still `recorded` (each is posted, abandoned or discarded).
pub async fn settled(app: &TestApp) -> bool {
    sqlx::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .fetch_one(app.pg())
    .await
    .expect("settled query")
}

/// The last 40 lines of `logs`, for failure messages.
pub fn tail(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
