//! Password login with SCRAM-SHA-256 and user management.

use crate::common::TestServer;

async fn login(
    server: &TestServer,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let conn = format!(
        "host={} port={} user={user} password={password} dbname=dev",
        server.addr.ip(),
        server.addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn code(err: &tokio_postgres::Error) -> Option<&str> {
    err.code().map(|c| c.code())
}

#[tokio::test]
async fn scram_login_and_user_management() {
    let server = TestServer::start_with_args(&["--auth", "password", "--root-password", "s3cret"]);

    let err = login(&server, "root", "wrong")
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(code(&err), Some("28P01"), "{err}");

    let root = login(&server, "root", "s3cret")
        .await
        .expect("root logs in");
    root.batch_execute("CREATE USER alice WITH PASSWORD 'wonder'")
        .await
        .unwrap();
    let err = root
        .batch_execute("CREATE USER alice WITH PASSWORD 'again'")
        .await
        .unwrap_err();
    assert_eq!(code(&err), Some("42710"));

    let alice = login(&server, "alice", "wonder")
        .await
        .expect("alice logs in");
    let row = alice.query_one("SELECT 1::INT", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);

    root.batch_execute("ALTER USER alice WITH PASSWORD 'land'")
        .await
        .unwrap();
    let err = login(&server, "alice", "wonder")
        .await
        .expect_err("the old password no longer works");
    assert_eq!(code(&err), Some("28P01"));
    login(&server, "alice", "land")
        .await
        .expect("the new password works");

    root.batch_execute("DROP USER alice").await.unwrap();
    let err = login(&server, "alice", "land")
        .await
        .expect_err("a dropped user cannot log in");
    assert_eq!(code(&err), Some("28P01"));
    let err = login(&server, "nobody", "x")
        .await
        .expect_err("unknown users cannot log in");
    assert_eq!(code(&err), Some("28P01"));
    let err = root.batch_execute("DROP USER alice").await.unwrap_err();
    assert_eq!(code(&err), Some("42704"));
}

#[tokio::test]
async fn trust_mode_needs_no_password_and_rejects_unknown_databases() {
    let server = TestServer::start();
    login(&server, "anyone", "")
        .await
        .expect("trust mode lets anyone in");
    let conn = format!(
        "host={} port={} user=root dbname=other",
        server.addr.ip(),
        server.addr.port()
    );
    let err = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .err()
        .expect("an unknown database is refused");
    assert_eq!(code(&err), Some("3D000"), "{err}");
}
