-- PostgreSQL -> Eddy -> PostgreSQL: change data capture of an `orders` table, a view of
-- per-customer totals, and that view kept in another PostgreSQL table.
--
-- A PostgreSQL with logical replication to read from and write to, for example (as a user
-- other than root):
--   initdb -D /tmp/pg -A trust -U postgres
--   postgres -D /tmp/pg -p 5433 -k /tmp -c wal_level=logical &
--   psql -h 127.0.0.1 -p 5433 -U postgres -c \
--     'CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount NUMERIC(12, 2));
--      INSERT INTO orders VALUES (1, 10, 12.50), (2, 10, 7.25), (3, 20, 100.00);
--      CREATE TABLE customer_totals (customer INT PRIMARY KEY, orders BIGINT, amount NUMERIC(20, 2))'
-- Then: psql -h localhost -p 4566 -U root -d dev -f examples/postgres_cdc.sql
-- and change `orders` in PostgreSQL: `customer_totals` follows.

CREATE SOURCE IF NOT EXISTS shop WITH (connector = 'postgres-cdc', hostname = '127.0.0.1',
    port = '5433', username = 'postgres', database.name = 'postgres');

CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(12, 2))
    FROM shop TABLE 'public.orders';

CREATE MATERIALIZED VIEW IF NOT EXISTS customer_totals AS
SELECT customer, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY customer;

CREATE SINK IF NOT EXISTS customer_totals_pg FROM customer_totals
WITH (connector = 'postgres', host = '127.0.0.1', port = '5433', user = 'postgres',
      database = 'postgres', table = 'customer_totals', primary_key = 'customer');

FLUSH;
SELECT * FROM customer_totals ORDER BY customer;
