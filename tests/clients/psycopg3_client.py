"""psycopg 3 with text and with binary results."""
import datetime
import decimal
import os

import psycopg

port = int(os.environ["EDDY_PORT"])
with psycopg.connect(host="127.0.0.1", port=port, user="root", dbname="dev", autocommit=True) as conn:
    conn.execute(
        "CREATE TABLE p3 (id BIGINT PRIMARY KEY, flag BOOLEAN, score DOUBLE PRECISION, price NUMERIC(12,3),"
        " day DATE, at TIMESTAMP, note TEXT, raw BYTEA)"
    )
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO p3 VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (1, True, 1.25, decimal.Decimal("123.456"), datetime.date(2024, 2, 29),
             datetime.datetime(2024, 1, 2, 3, 4, 5, 500000), "hello", b"\x00\x01\xff"),
        )
        cur.execute("INSERT INTO p3 (id) VALUES (%s)", (2,))
    expected = (1, True, 1.25, decimal.Decimal("123.456"), datetime.date(2024, 2, 29),
                datetime.datetime(2024, 1, 2, 3, 4, 5, 500000), "hello", b"\x00\x01\xff")
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute("SELECT * FROM p3 ORDER BY id")
            rows = cur.fetchall()
            assert rows[0] == expected, (binary, rows[0])
            assert rows[1] == (2, None, None, None, None, None, None, None), (binary, rows[1])
    # Server-side prepared statement reused many times.
    for i in range(6):
        row = conn.execute("SELECT note FROM p3 WHERE id = %s", (1,), prepare=True).fetchone()
        assert row == ("hello",)
print("psycopg3 ok")
