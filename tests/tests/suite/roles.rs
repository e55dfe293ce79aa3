//! A fleet's database roles (README.md, Database roles): each process role connects as a member
//! of its runtime role, which owns nothing and may not change the journal or its guards;
//! `settle verify` says when one could.

use sqlx::postgres::PgPoolOptions;
use tests::TestDb;
use tests::app::{AppOptions, config_toml, spawn};
use tests::db::{RUNTIME_ROLES, as_role};
use tests::process::{Scratch, run_settle};

/// PostgreSQL's SQLSTATE for "insufficient privilege" (and "must be owner").
const INSUFFICIENT_PRIVILEGE: &str = "42501";

async fn refused(pool: &sqlx::PgPool, sql: &str) -> String {
    let error = sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(pool)
        .await
        .expect_err(sql);
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|code| code.into_owned())
        .unwrap_or_default();
    assert_eq!(code, INSUFFICIENT_PRIVILEGE, "{sql}: {error}");
    error.to_string()
}

/// As any runtime role, PostgreSQL refuses to change a journal line, to switch a journal
/// trigger off, to replace the function a trigger calls, to create a function, and to run a
/// program on the database's host.
#[tokio::test]
async fn no_runtime_role_can_change_the_journal_or_its_guards() {
    let app = spawn(AppOptions::default()).await;
    tests::fleet::record_charges(&app, "evt_role_", 3).await;
    app.wait_settled(30).await;
    assert_eq!(app.count("journal_entries").await, 3);
    for role in RUNTIME_ROLES {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&as_role(&app.database_url(), role))
            .await
            .expect("connect as the role");
        refused(&pool, "UPDATE journal_lines SET amount = amount * 2").await;
        refused(&pool, "DELETE FROM journal_entries").await;
        refused(&pool, "TRUNCATE journal_lines").await;
        let error = refused(&pool, "ALTER TABLE journal_lines DISABLE TRIGGER ALL").await;
        assert!(error.contains("must be owner"), "{error}");
        refused(
            &pool,
            "CREATE OR REPLACE FUNCTION journal_refuse_change() RETURNS trigger
             LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
        )
        .await;
        refused(
            &pool,
            "CREATE FUNCTION settle_backdoor() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        )
        .await;
        // A program run by the database server's own user.
        refused(&pool, "COPY (SELECT 1) TO PROGRAM 'true'").await;
        pool.close().await;
    }
    assert_eq!(app.count("journal_entries").await, 3);
    assert!(app.failed_invariants().await.is_empty());
}

/// `settle verify` fails while a runtime role may update the journal, and `settle migrate`
/// (which grants again once the roles exist) takes the privilege back.
#[tokio::test]
async fn verify_fails_while_a_runtime_role_could_alter_the_journal() {
    let app = spawn(AppOptions::default()).await;
    assert!(app.failed_invariants().await.is_empty());
    sqlx::query("GRANT UPDATE ON journal_lines TO settle_worker")
        .execute(app.pg())
        .await
        .expect("grant");
    sqlx::query("GRANT CREATE ON SCHEMA public TO settle_ingress")
        .execute(app.pg())
        .await
        .expect("grant");
    sqlx::query("GRANT INSERT ON receivable_deltas TO settle_console")
        .execute(app.pg())
        .await
        .expect("grant");
    let failed = app.failed_invariants().await;
    let check = failed
        .iter()
        .find(|f| f.starts_with("runtime_roles_cannot_alter_the_journal"))
        .unwrap_or_else(|| panic!("{failed:?}"));
    for said in [
        "role settle_worker may update journal_lines",
        "role settle_t_worker may update journal_lines",
        "role settle_ingress may create in schema public",
        "role settle_console may insert receivable_deltas",
    ] {
        assert!(check.contains(said), "{check}");
    }
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &config_toml(&app.database_url(), &AppOptions::default()),
    );
    let (migrated, output) = run_settle(&config, &app.database_url(), &["migrate"]).await;
    assert!(migrated, "{output}");
    assert!(app.failed_invariants().await.is_empty());
}

/// `settle verify` names a runtime role that owns the function a journal trigger calls, owns
/// a table, or may add triggers to a guarded one: each could switch a guard off. (Making a
/// runtime role a superuser is not tried here: roles are the cluster's, shared by every test
/// database.)
#[tokio::test]
async fn verify_fails_while_a_runtime_role_owns_a_guard_or_may_add_triggers() {
    let app = spawn(AppOptions::default()).await;
    assert!(app.failed_invariants().await.is_empty());
    let owner: String = sqlx::query_scalar(
        "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'journal_lines'",
    )
    .fetch_one(app.pg())
    .await
    .expect("owner");
    let pool = app.pg().clone();
    let run = |sql: String| {
        let pool = pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    };
    run("ALTER FUNCTION journal_refuse_change() OWNER TO settle_console".into()).await;
    run("ALTER TABLE feed_cursors OWNER TO settle_worker".into()).await;
    run("GRANT TRIGGER ON settlement_events TO settle_ingress".into()).await;
    let failed = app.failed_invariants().await;
    let check = failed
        .iter()
        .find(|f| f.starts_with("runtime_roles_cannot_alter_the_journal"))
        .unwrap_or_else(|| panic!("{failed:?}"));
    for said in [
        "role settle_console owns function journal_refuse_change()",
        "role settle_worker owns feed_cursors",
        "role settle_ingress may trigger settlement_events",
    ] {
        assert!(check.contains(said), "{said}: {check}");
    }
    run(format!(
        "ALTER FUNCTION journal_refuse_change() OWNER TO \"{owner}\""
    ))
    .await;
    run(format!("ALTER TABLE feed_cursors OWNER TO \"{owner}\"")).await;
    run("REVOKE TRIGGER ON settlement_events FROM settle_ingress".into()).await;
    assert!(app.failed_invariants().await.is_empty());
}

/// `settle db grant-roles` creates and grants the roles on PostgreSQL; on SQLite it explains
/// that a file has one user.
#[tokio::test]
async fn grant_roles_grants_on_postgres_and_explains_itself_on_sqlite() {
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let config = scratch.write("settle.toml", &config_toml(&db.url, &AppOptions::default()));
    let (granted, output) = run_settle(&config, &db.url, &["db", "grant-roles"]).await;
    assert!(granted, "{output}");
    assert!(
        output.contains("settle_ingress, settle_worker, settle_console"),
        "{output}"
    );
    let pool = db.pool().await;
    let may: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT r, has_table_privilege(r, 'settlement_events', 'INSERT'),
                has_table_privilege(r, 'journal_entries', 'INSERT')
         FROM unnest($1::text[]) AS r ORDER BY r",
    )
    .bind(RUNTIME_ROLES.as_slice())
    .fetch_all(&pool)
    .await
    .expect("privileges");
    assert_eq!(
        may,
        [
            ("settle_console".to_owned(), true, true),
            ("settle_ingress".to_owned(), true, false),
            ("settle_worker".to_owned(), true, true),
        ]
    );
    pool.close().await;

    let file = tests::db::SqliteFile::create();
    let output = tests::process::settle_command()
        .arg("--config")
        .arg(&config)
        .args(["db", "grant-roles"])
        .env("DATABASE_URL", file.url())
        .output()
        .await
        .expect("run settle");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("an SQLite database has one user"),
        "{stderr}"
    );
}

/// A console connected as `settle_console` does every operator action its role grants allow:
/// a dashboard login, a requeue, a pause and a resume, a payload erased, a reversal.
#[tokio::test]
async fn a_console_connected_as_its_role_does_every_operator_action() {
    use tests::app::{FINANCE_TOKEN, OPS_TOKEN, charge};
    let app = spawn(AppOptions::default()).await;
    for (id, body) in [
        ("msg_ok", charge("ch_ok", "10.00", "0.30", "9.70")),
        ("msg_bad", charge("ch_bad", "100.00", "3.20", "90.00")),
    ] {
        assert_eq!(app.post_standard(id, &body).await.status().as_u16(), 200);
    }
    app.wait_settled(30).await;
    let database = app.stop().await;
    let console = tests::app::start(
        database,
        AppOptions {
            role: ops::Role::Console,
            ..AppOptions::default()
        },
    )
    .await;
    let (status, letters) = console.api_get("/api/dead-letters", Some(OPS_TOKEN)).await;
    assert_eq!(status, 200);
    let letter = letters["items"][0]["id"].as_i64().expect("a dead letter");
    let reason = serde_json::json!({"reason": "checked as the console's role"});
    for path in [
        format!("/api/dead-letters/{letter}/requeue"),
        "/api/sources/std/pause".to_owned(),
        "/api/sources/std/resume".to_owned(),
    ] {
        let (status, body) = console
            .api_post(&path, Some(OPS_TOKEN), reason.clone())
            .await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (event, entry): (i64, i64) = sqlx::query_as(
        "SELECT id, posted_entry_id FROM settlement_events WHERE external_id = 'msg_ok'",
    )
    .fetch_one(console.pg())
    .await
    .expect("the posted event");
    let (status, body) = console
        .api_post(
            &format!("/api/events/{event}/erase-payload"),
            Some(OPS_TOKEN),
            reason.clone(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = console
        .api_post(
            &format!("/api/journal/{entry}/reverse"),
            Some(FINANCE_TOKEN),
            reason.clone(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(console.log_in(OPS_TOKEN).await.status().as_u16(), 303);
    assert_eq!(console.count("dashboard_sessions").await, 1);
    assert!(console.failed_invariants().await.is_empty());
}
