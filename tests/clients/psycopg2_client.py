"""psycopg2 (libpq, text results) against a running Eddy: DDL, DML with parameters, reads."""
import decimal
import os
import sys

import psycopg2

port = int(os.environ["EDDY_PORT"])
conn = psycopg2.connect(host="127.0.0.1", port=port, user="root", dbname="dev")
conn.autocommit = True
cur = conn.cursor()

assert conn.encoding == "UTF8", conn.encoding
cur.execute("SELECT version()")
assert cur.fetchone()[0].startswith("PostgreSQL 15."), "version() must start with PostgreSQL 15."

cur.execute("CREATE TABLE p2 (id INT PRIMARY KEY, name VARCHAR NOT NULL, amount NUMERIC(10,2), at TIMESTAMP)")
cur.executemany(
    "INSERT INTO p2 VALUES (%s, %s, %s, %s)",
    [(1, "ann", decimal.Decimal("10.50"), "2024-01-01 10:00:00"), (2, "bob", decimal.Decimal("3.25"), None)],
)
cur.execute("UPDATE p2 SET amount = amount * 2 WHERE id = %s", (2,))
assert cur.rowcount == 1, cur.rowcount
cur.execute("SELECT id, name, amount, at FROM p2 ORDER BY id")
rows = cur.fetchall()
assert [c.name for c in cur.description] == ["id", "name", "amount", "at"], cur.description
assert rows[0][0] == 1 and rows[0][1] == "ann" and rows[0][2] == decimal.Decimal("10.50"), rows
assert str(rows[0][3]) == "2024-01-01 10:00:00", rows
assert rows[1][2] == decimal.Decimal("6.50") and rows[1][3] is None, rows

cur.execute("SELECT count(*) FROM p2 WHERE name = %s", ("it's",))
assert cur.fetchone()[0] == 0

try:
    cur.execute("SELECT * FROM no_such_table")
    raise AssertionError("expected an error")
except psycopg2.errors.UndefinedTable as e:
    assert e.pgcode == "42P01"
cur.execute("SELECT 1")
assert cur.fetchone() == (1,)
print("psycopg2 ok")
