//! Idle pickup latency: how long after its 2xx an event is posted, when the workers are idle
//! and waiting. Production worker settings (1 s poll fallback), so what is measured is the
//! LISTEN/NOTIFY path. Run: `cargo bench -p tests --bench pickup` (PostgreSQL on 127.0.0.1).

use std::time::{Duration, Instant};

use tests::app::{AppOptions, charge, spawn};

const SAMPLES: usize = 300;
const WARMUP: usize = 20;
const IDLE_BETWEEN: Duration = Duration::from_millis(30);

#[tokio::main]
async fn main() {
    let app = spawn(AppOptions {
        workers: String::new(),
        ..AppOptions::default()
    })
    .await;
    let mut latencies_us = Vec::with_capacity(SAMPLES);
    for i in 0..WARMUP + SAMPLES {
        let body = charge(&format!("ch_{i}"), "10.00", "0.30", "9.70");
        let response = app.post_standard(&format!("msg_{i}"), &body).await;
        let acknowledged = Instant::now();
        let json: serde_json::Value = response.json().await.expect("json");
        let event_id = json["event_id"].as_i64().expect("event id");
        loop {
            let status: String =
                sqlx::query_scalar("SELECT status FROM settlement_events WHERE id = $1")
                    .bind(event_id)
                    .fetch_one(app.pg())
                    .await
                    .expect("status");
            if status == "posted" {
                break;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        if i >= WARMUP {
            latencies_us.push(acknowledged.elapsed().as_micros() as u64);
        }
        tokio::time::sleep(IDLE_BETWEEN).await;
    }
    latencies_us.sort_unstable();
    let at = |q: usize| Duration::from_micros(latencies_us[(latencies_us.len() - 1) * q / 100]);
    println!(
        "idle pickup, 2xx -> posted, {SAMPLES} events: p50 {:.1?}, p90 {:.1?}, p99 {:.1?}, max {:.1?}",
        at(50),
        at(90),
        at(99),
        at(100)
    );
    app.stop().await;
}
