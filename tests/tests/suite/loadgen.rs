//! The load generator, small: its answers add up and the store holds exactly its events.

use ops::loadgen::{LoadOptions, LoadProvider, run, verify};
use tests::app::{ADYEN_KEY, AppOptions, Backend, STANDARD_SECRET, STRIPE_SECRET, spawn};

fn options(url: String, source: &str, provider: LoadProvider, secret: &str) -> LoadOptions {
    LoadOptions {
        url,
        source: source.into(),
        provider,
        secret: secret.into(),
        concurrency: 16,
        rate: 0,
        count: 200,
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
            ("std", LoadProvider::Standard, STANDARD_SECRET),
            ("stripe", LoadProvider::Stripe, STRIPE_SECRET),
            ("adyen", LoadProvider::Adyen, ADYEN_KEY),
        ] {
            let options = options(app.url(""), source, provider, secret);
            let report = run(options.clone()).await.expect("load runs");
            assert_eq!(
                report.unanswered, 0,
                "{backend:?} {source}: {:?}",
                report.answers
            );
            verify(&app.store, &options, &report, 200)
                .await
                .unwrap_or_else(|e| panic!("{backend:?} {source}: {e}"));
            let recorded = report.count("200 recorded") + report.count("200 [accepted]");
            assert!(
                recorded >= 200,
                "{backend:?} {source}: {:?}",
                report.answers
            );
            if provider != LoadProvider::Adyen {
                assert_eq!(
                    report.count("200 recorded"),
                    200,
                    "{backend:?} {source}: {:?}",
                    report.answers
                );
                assert!(
                    report.count("409 event_conflict") > 0,
                    "conflicts were sent and answered 409"
                );
                assert!(report.count("200 duplicate") > 0, "redeliveries replayed");
            }
        }
        app.wait_settled(60).await;
        assert!(app.failed_invariants().await.is_empty(), "{backend:?}");
    }
}
