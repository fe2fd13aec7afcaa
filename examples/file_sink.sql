-- A Nexmark bid stream, aggregated per 10-second window, written as Parquet files.
-- Run: psql -h localhost -p 4566 -U root -d dev -f examples/file_sink.sql
-- Files appear in /tmp/eddy-example/bids_per_window as each checkpoint commits.

CREATE SOURCE IF NOT EXISTS example_bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.event.num = 100000);

CREATE SINK IF NOT EXISTS bids_per_window AS
SELECT window_start, auction, count(*) AS bids, max(price) AS top_price
FROM TUMBLE(example_bid, date_time, INTERVAL '10' SECOND)
GROUP BY window_start, auction
WITH (connector = 'file', path = '/tmp/eddy-example/bids_per_window', force_append_only = 'true')
FORMAT PLAIN ENCODE PARQUET;

-- Every bid, as JSON lines, 10000 per file.
CREATE SINK IF NOT EXISTS raw_bids FROM example_bid
WITH (connector = 'file', path = '/tmp/eddy-example/raw_bids', max_row_count = '10000')
FORMAT PLAIN ENCODE JSON;

FLUSH;
SELECT name, state, rows_written FROM eddy_catalog.jobs;
