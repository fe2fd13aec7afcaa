-- Keeps a PostgreSQL table equal to an aggregate over an Eddy table.
--
-- A PostgreSQL to write to, for example (as a user other than root):
--   initdb -D /tmp/pg -A trust -U postgres && postgres -D /tmp/pg -p 5433 -k /tmp &
--   psql -h 127.0.0.1 -p 5433 -U postgres -c \
--     'CREATE TABLE order_totals (customer INT PRIMARY KEY, orders BIGINT, amount NUMERIC(20, 2))'
-- Then: psql -h localhost -p 4566 -U root -d dev -f examples/postgres_sink.sql

CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(12, 2));

CREATE SINK IF NOT EXISTS order_totals_pg AS
SELECT customer, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY customer
WITH (connector = 'postgres', host = '127.0.0.1', port = '5433', user = 'postgres',
      database = 'postgres', table = 'order_totals', primary_key = 'customer');

INSERT INTO orders VALUES (1, 10, 12.50), (2, 10, 7.25), (3, 20, 100.00);
UPDATE orders SET amount = 8.00 WHERE id = 2;
DELETE FROM orders WHERE id = 3;
FLUSH;
-- order_totals in PostgreSQL now holds (10, 2, 20.50): customer 20 is gone.
