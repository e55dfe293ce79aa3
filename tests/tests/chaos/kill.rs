//! Scenario 2, Worker SIGKILL: a backlog drained by four `settle worker` processes while one of them is
//! SIGKILLed every second and restarted → nothing lost, nothing posted twice, every event terminal.

use std::time::{Duration, Instant};

use ops::Role;
use serde_json::json;
use tests::app::{AppOptions, FAST_WORKERS, spawn};
use tests::fleet::{Fleet, record_charges, settled, tail};
use tests::process::Scratch;

use crate::{counts, report, scale, verify};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_drain_while_one_is_sigkilled_every_second() {
    // Large enough at full scale that kills land on open attempts (5,000 drained in 4 s, before
    // a kill every 2 s caught one).
    let events = scale(2_000, 20_000);
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "kill_", events).await;
    let scratch = Scratch::new();
    let mut fleet = Fleet::new(
        &scratch,
        &app,
        &format!("{FAST_WORKERS}\nconcurrency = 8"),
        vec![],
    );
    fleet.start(4);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(900);
    let mut kills = 0;
    while !settled(&app).await {
        assert!(
            Instant::now() < deadline,
            "the fleet did not drain; logs:\n{}",
            tail(&scratch.logs())
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        fleet.kill_and_restart(kills % 4).await;
        kills += 1;
    }
    let drained_ms = started.elapsed().as_millis();

    let (stored, jobs, entries, posted, dead) = counts(app.pg()).await;
    let expected = i64::try_from(events).expect("count");
    assert_eq!(
        (stored, jobs, entries, posted, dead),
        (expected, expected, expected, expected, 0),
        "0 lost, 0 duplicated, all posted ({kills} kills)"
    );
    // A killed attempt is closed as `died` by the next runner; its successor starts after the
    // orphan window and the backoff. The longest such gap is the longest rescue.
    let (died, longest_rescue_ms): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(max(extract(epoch FROM n.started_at - d.started_at) * 1000), 0)::bigint
         FROM job_attempts d JOIN job_attempts n ON n.job_id = d.job_id AND n.attempt = d.attempt + 1
         WHERE d.outcome = 'died'",
    )
    .fetch_one(app.pg())
    .await
    .expect("rescues");
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_attempts WHERE finished_at IS NULL")
            .fetch_one(app.pg())
            .await
            .expect("open attempts");
    assert_eq!(open, 0, "no attempt left open once everything posted");
    assert!(kills >= 1, "at least one worker was killed mid-drain");
    verify(&fleet.config, &app.database_url()).await;
    report(
        "worker_sigkill",
        json!({"events": events, "workers": 4, "kills": kills, "drained_ms": drained_ms,
               "entries": entries, "posted": posted, "dead_letters": dead,
               "died_attempts_rescued": died, "longest_rescue_ms": longest_rescue_ms,
               "verify": "passed"}),
    );
}
