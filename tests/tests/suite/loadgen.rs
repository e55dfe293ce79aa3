//! The load generator, small: its answers add up and the store holds exactly its events.

use ops::loadgen::{LoadOptions, LoadReport, run, verify};
use tests::app::{ADYEN_KEY, AppOptions, Backend, STANDARD_SECRET, STRIPE_SECRET, spawn};

fn options(url: String, source: &str, provider: &str, secret: &str) -> LoadOptions {
    LoadOptions {
        url,
        source: source.into(),
        provider: provider.into(),
        secret: secret.into(),
        concurrency: 16,
        rate: 0,
        count: 200,
        duration_secs: None,
        redelivery_percent: 10,
        concurrent_duplicate_percent: 10,
        conflict_percent: 5,
        prefix: None,
        resend_rounds: 3,
    }
}

#[tokio::test]
async fn a_small_load_records_every_event_once_for_each_provider_and_backend() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let app = spawn(AppOptions::on(backend)).await;
        for (source, provider, secret) in [
            ("std", "standard", STANDARD_SECRET),
            ("stripe", "stripe", STRIPE_SECRET),
            ("adyen", "adyen", ADYEN_KEY),
        ] {
            let options = options(app.url(""), source, provider, secret);
            let report = run(options.clone()).await.expect("load runs");
            assert_eq!(
                report.unanswered, 0,
                "{backend:?} {source}: {:?}",
                report.answers
            );
            assert_eq!(report.events, 200, "{backend:?} {source}");
            verify(&app.store, &options, &report)
                .await
                .unwrap_or_else(|e| panic!("{backend:?} {source}: {e}"));
            assert!(
                report.conflicted_events > 0,
                "{backend:?} {source}: conflicts were sent, answered and kept"
            );
            let recorded = report.count("200 recorded") + report.count("200 [accepted]");
            assert!(
                recorded >= 200,
                "{backend:?} {source}: {:?}",
                report.answers
            );
            if provider != "adyen" {
                assert_eq!(
                    report.count("200 recorded"),
                    200,
                    "{backend:?} {source}: {:?}",
                    report.answers
                );
                assert_eq!(
                    report.count("409 event_conflict"),
                    report.conflicted_events,
                    "each conflict answered 409"
                );
                assert!(report.count("200 duplicate") > 0, "redeliveries replayed");
            }
        }
        app.wait_settled(60).await;
        assert!(app.failed_invariants().await.is_empty(), "{backend:?}");
    }
}

#[tokio::test]
async fn a_paced_load_for_a_duration_outlasts_its_count_and_keeps_to_its_rate() {
    let app = spawn(AppOptions::on(Backend::Postgres)).await;
    let options = LoadOptions {
        rate: 100,
        duration_secs: Some(2),
        // Ignored for a duration: a run that stopped at the count would send only these.
        count: 5,
        ..options(app.url(""), "std", "standard", STANDARD_SECRET)
    };
    let report = run(options.clone()).await.expect("load runs");
    // New events go out only in the rate's slots due within the duration: at most 200, some of
    // those slots taken by redeliveries and conflicts.
    assert!(
        report.events > 5 && report.events <= 200,
        "{} events in a 2 s run at 100/s",
        report.events
    );
    assert_eq!(report.unanswered, 0, "{:?}", report.answers);
    assert_eq!(report.count("200 recorded"), report.events);
    verify(&app.store, &options, &report)
        .await
        .expect("the store holds exactly the run's events");
    assert!(
        report
            .acknowledged_at
            .iter()
            .take(report.events)
            .all(Option::is_some),
        "every event's acknowledgement is timed"
    );
}

#[tokio::test]
async fn verification_fails_when_the_store_lacks_what_was_answered() {
    let app = spawn(AppOptions::on(Backend::Postgres)).await;
    let elsewhere = spawn(AppOptions::on(Backend::Sqlite)).await;
    let options = LoadOptions {
        count: 40,
        ..options(app.url(""), "std", "standard", STANDARD_SECRET)
    };
    let report = run(options.clone()).await.expect("load runs");
    verify(&app.store, &options, &report)
        .await
        .expect("the store that took the load holds it");
    let error = verify(&elsewhere.store, &options, &report)
        .await
        .expect_err("an empty store cannot hold the run");
    assert!(error.to_string().contains("holds 0 events"), "{error}");

    // Conflicts: one answered must be kept; one without an answer may be kept or not.
    assert!(report.conflicted_events > 0, "{:?}", report.answers);
    let answered_but_lost = LoadReport {
        conflicted_events: report.conflicted_events + 1,
        ..report.clone()
    };
    let error = verify(&app.store, &options, &answered_but_lost)
        .await
        .expect_err("an answered conflict the store lacks");
    assert!(error.to_string().contains("kept conflicts"), "{error}");
    let kept_without_an_answer = LoadReport {
        conflicted_events: report.conflicted_events - 1,
        conflicts_unanswered: 1,
        ..report.clone()
    };
    verify(&app.store, &options, &kept_without_an_answer)
        .await
        .expect("a conflict kept whose answer was lost");
    let kept_but_never_sent = LoadReport {
        conflicted_events: report.conflicted_events - 1,
        ..report
    };
    verify(&app.store, &options, &kept_but_never_sent)
        .await
        .expect_err("more conflicts kept than were sent");
}
