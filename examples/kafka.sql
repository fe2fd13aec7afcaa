-- Kafka in, Kafka out: per-key totals of a JSON topic, kept up to date in an upsert topic.
-- Needs a broker on 127.0.0.1:9092 with topics `events` and `totals`, e.g. tansu:
--   ~/.cache/eddy-tools/bin/tansu broker --listener-url tcp://127.0.0.1:9092 \
--       --advertised-listener-url tcp://127.0.0.1:9092 --storage-engine memory://tansu/ &
--   ~/.cache/eddy-tools/bin/tansu topic create events --broker tcp://127.0.0.1:9092
--   ~/.cache/eddy-tools/bin/tansu topic create totals --broker tcp://127.0.0.1:9092
-- and messages like {"id": 1, "k": 3, "price": "12.50"} in `events`.
-- Run: psql -h localhost -p 4566 -U root -d dev -f examples/kafka.sql

CREATE SOURCE IF NOT EXISTS events (id BIGINT, k INT, price DECIMAL(10, 2))
WITH (connector = 'kafka', topic = 'events', properties.bootstrap.server = '127.0.0.1:9092',
      scan.startup.mode = 'earliest')
FORMAT PLAIN ENCODE JSON;

CREATE MATERIALIZED VIEW IF NOT EXISTS totals AS
SELECT k, count(*) AS n, sum(price) AS total FROM events GROUP BY k;

CREATE SINK IF NOT EXISTS totals_out FROM totals
WITH (connector = 'kafka', topic = 'totals', properties.bootstrap.server = '127.0.0.1:9092',
      primary_key = 'k', sink.delivery = 'exactly_once')
FORMAT UPSERT ENCODE JSON;

FLUSH;
SELECT * FROM totals ORDER BY k;
