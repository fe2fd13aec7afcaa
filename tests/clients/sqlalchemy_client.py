"""SQLAlchemy 2 (psycopg2 dialect): inspect() and pandas.read_sql."""
import os

import pandas
import sqlalchemy
from sqlalchemy import inspect, text

port = int(os.environ["EDDY_PORT"])
engine = sqlalchemy.create_engine(f"postgresql+psycopg2://root@127.0.0.1:{port}/dev")
with engine.connect() as conn:
    conn.execute(text("CREATE TABLE sa_t (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, score DOUBLE PRECISION)"))
    conn.execute(text("INSERT INTO sa_t VALUES (1, 'ann', 1.5), (2, 'bob', 2.5)"))
    conn.execute(text("CREATE VIEW sa_v AS SELECT name FROM sa_t"))
    conn.commit()

insp = inspect(engine)
assert insp.has_table("sa_t"), "has_table"
assert not insp.has_table("nope"), "has_table on a missing table"
assert "sa_t" in insp.get_table_names(), insp.get_table_names()
assert "sa_v" in insp.get_view_names(), insp.get_view_names()
cols = {c["name"]: c for c in insp.get_columns("sa_t")}
assert list(cols) == ["id", "name", "score"], cols
assert cols["id"]["nullable"] is False and cols["score"]["nullable"] is True, cols
assert isinstance(cols["id"]["type"], sqlalchemy.Integer), cols["id"]
assert isinstance(cols["score"]["type"], sqlalchemy.Float), cols["score"]
pk = insp.get_pk_constraint("sa_t")
assert pk["constrained_columns"] == ["id"], pk

frame = pandas.read_sql("SELECT id, name, score FROM sa_t ORDER BY id", engine)
assert list(frame["name"]) == ["ann", "bob"], frame
assert frame["score"].sum() == 4.0, frame
print("sqlalchemy ok")
