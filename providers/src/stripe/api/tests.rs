use super::*;

fn settings(api_base: String) -> ApiSettings {
    ApiSettings {
        api_base,
        requests_per_sec: 25,
        endpoint_requests_per_sec: 25,
        connect_timeout_ms: 2_000,
        request_timeout_ms: 5_000,
    }
}

/// A balance is read once (by a command, or for an opening): a 500 and a 429 that Stripe
/// answers first are asked again; a refused key is not.
#[tokio::test]
async fn a_balance_read_is_asked_again_through_transient_failures() {
    use crate::stripe::fake::{Fault, FakeStripe};
    let fake = FakeStripe::start("rk_test_x").await.expect("fake");
    fake.fail_next(
        "/v1/balance",
        vec![
            Fault::ServerError,
            Fault::RateLimited {
                retry_after_secs: 0,
            },
        ],
    );
    let api = StripeApi::new(
        SourceName::parse("stripe").expect("name"),
        ApiKey::new("rk_test_x"),
        &settings(fake.url()),
    )
    .expect("client");
    api.balance(None).await.expect("read on the third request");
    assert_eq!(fake.requests(), 3);
    fake.fail_next("/v1/balance", vec![Fault::Unauthorized]);
    let error = api.balance(None).await.expect_err("a refused key");
    assert!(matches!(error, ProviderError::Auth { status: 401 }), "{error:?}");
    assert_eq!(fake.requests(), 4, "a refused key is not asked again");
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let elsewhere_addr = elsewhere.local_addr().expect("addr");
    let redirecting = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", redirecting.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = redirecting.accept().await {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head).await;
            let answer = format!(
                "HTTP/1.1 302 Found\r\nLocation: http://{elsewhere_addr}/v1/balance\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let api = StripeApi::new(
        SourceName::parse("stripe").expect("name"),
        ApiKey::new("rk_test_x"),
        &settings(base),
    )
    .expect("client");
    let error = api.balance(None).await.expect_err("a redirect is an error");
    assert!(
        matches!(&error, ProviderError::Response(detail) if detail.contains("302")),
        "{error:?}"
    );
    let followed =
        tokio::time::timeout(Duration::from_millis(300), elsewhere.accept()).await;
    assert!(followed.is_err(), "nothing reached the redirect's target");
}

#[test]
fn api_base_is_never_printed_and_carries_no_credentials() {
    let source = || SourceName::parse("stripe").expect("name");
    for (base, why) in [
        ("ftp://user:hunter2@x", "api_base is not an http(s) URL"),
        (
            "https://user:hunter2@api.stripe.com",
            "api_base must not carry a user name or password",
        ),
    ] {
        let error = StripeApi::new(source(), ApiKey::new("k"), &settings(base.into()))
            .expect_err("refused");
        assert_eq!(error, why);
        assert!(!error.contains("hunter2"));
    }
}

#[test]
fn ids_must_be_one_path_segment() {
    assert!(segment("txn_1ABC").is_ok());
    for bad in ["", "../v1/charges", "txn 1", "txn/1", "txn?x=1"] {
        assert!(segment(bad).is_err(), "{bad}");
    }
}
