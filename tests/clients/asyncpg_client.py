"""asyncpg: types inferred on Describe, binary results on every column."""
import asyncio
import datetime
import decimal
import os


async def main():
    import asyncpg

    port = int(os.environ["EDDY_PORT"])
    conn = await asyncpg.connect(host="127.0.0.1", port=port, user="root", database="dev")
    await conn.execute(
        "CREATE TABLE ap (id INT PRIMARY KEY, name TEXT, amount NUMERIC(10,2), day DATE, at TIMESTAMPTZ, ok BOOLEAN)"
    )
    await conn.executemany(
        "INSERT INTO ap VALUES ($1, $2, $3, $4, $5, $6)",
        [
            (1, "ann", decimal.Decimal("1.50"), datetime.date(2024, 1, 1),
             datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.timezone.utc), True),
            (2, "bob", None, None, None, False),
        ],
    )
    rows = await conn.fetch("SELECT id, name, amount, day, at, ok FROM ap WHERE id >= $1 ORDER BY id", 1)
    assert len(rows) == 2, rows
    r = rows[0]
    assert r["id"] == 1 and r["name"] == "ann" and r["amount"] == decimal.Decimal("1.50"), r
    assert r["day"] == datetime.date(2024, 1, 1), r
    assert r["at"] == datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.timezone.utc), r
    assert r["ok"] is True and rows[1]["amount"] is None, rows
    value = await conn.fetchval("SELECT count(*) FROM ap WHERE name = $1", "bob")
    assert value == 1, value
    await conn.close()
    print("asyncpg ok")


asyncio.run(main())
