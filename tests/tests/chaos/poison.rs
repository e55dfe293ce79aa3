//! Scenario 3, Poison: a job that kills its worker process on every attempt ends in the dead letter after
//! `attempts_max`, stays there past every retry horizon, and other events post meanwhile.

use std::time::{Duration, Instant};

use ops::Role;
use serde_json::json;
use tests::TestApp;
use tests::app::{AppOptions, FAST_WORKERS, spawn};
use tests::fleet::{Fleet, record_charges, settled, tail};
use tests::process::Scratch;

use crate::{report, scale, verify};

async fn poison_attempts(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
         WHERE e.external_id = 'poison_0'",
    )
    .fetch_one(app.pg())
    .await
    .expect("attempts")
}

async fn posted(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
        .fetch_one(app.pg())
        .await
        .expect("posted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_kills_its_worker_every_time_is_dead_lettered_and_stays_there() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "poison_", 1).await;
    record_charges(&app, "evt_", 300).await;
    let scratch = Scratch::new();
    let env = vec![(workers::chaos::ABORT_PREFIX_ENV, "poison_".to_owned())];
    // Backoffs of at most 1 s and a 2 s orphan window: every retry horizon is a few seconds.
    let mut fleet = Fleet::new(
        &scratch,
        &app,
        &format!("{FAST_WORKERS}\nattempts_max = 3\nconcurrency = 4"),
        env,
    );
    fleet.start(2);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(180);
    let mut revived = 0;
    while !settled(&app).await {
        assert!(
            Instant::now() < deadline,
            "did not settle; logs:\n{}",
            tail(&scratch.logs())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        revived += fleet.revive();
    }
    let dead_lettered_ms = started.elapsed().as_millis();
    assert_eq!(
        app.event_state("poison_0").await,
        ("abandoned".into(), Some("worker_died".into()))
    );
    let (class, attempts): (String, i32) = sqlx::query_as(
        "SELECT error_class, attempts FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
         WHERE e.external_id = 'poison_0'",
    )
    .fetch_one(app.pg())
    .await
    .expect("dead letter");
    assert_eq!((class.as_str(), attempts), ("exhausted", 3));
    assert!(
        revived >= 3,
        "the poison killed a worker on each of its attempts ({revived} restarts)"
    );
    // After its first death the poison ran alone: its later deaths took no other attempt with
    // them (each process dies once, and its name is its own).
    let taken_along: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_attempts p
         JOIN settlement_events e ON e.id = p.event_id AND e.external_id = 'poison_0'
         JOIN job_attempts other ON other.worker = p.worker AND other.job_id <> p.job_id
         WHERE p.attempt > 1 AND other.outcome = 'died'",
    )
    .fetch_one(app.pg())
    .await
    .expect("bystanders");
    assert_eq!(
        taken_along, 0,
        "a suspect's death took other attempts with it"
    );
    assert_eq!(posted(&app).await, 300, "every other event posted");

    // Wait far past every retry horizon, while new events keep arriving and posting: the
    // poison is never started again.
    let attempts_before = poison_attempts(&app).await;
    let wait_secs = u64::try_from(scale(8, 60)).expect("secs");
    let waited = Instant::now();
    let mut batch = 0;
    while waited.elapsed() < Duration::from_secs(wait_secs) {
        record_charges(&app, &format!("late{batch}_"), 20).await;
        batch += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
        fleet.revive();
    }
    app.wait_settled(120).await;
    assert_eq!(
        poison_attempts(&app).await,
        attempts_before,
        "nothing runs a dead letter again"
    );
    assert_eq!(app.event_state("poison_0").await.0, "abandoned");
    let late = i64::from(batch) * 20;
    assert_eq!(
        posted(&app).await,
        300 + late,
        "later events posted meanwhile"
    );
    verify(&fleet.config, &app.database_url()).await;
    report(
        "poison",
        json!({"attempts_max": 3, "poison_attempts": attempts_before, "worker_restarts": revived,
               "dead_lettered_after_ms": dead_lettered_ms, "waited_past_horizon_secs": wait_secs,
               "attempts_after_wait": attempts_before, "others_posted": 300 + late,
               "other_attempts_taken_by_later_deaths": taken_along,
               "verify": "passed"}),
    );
}
