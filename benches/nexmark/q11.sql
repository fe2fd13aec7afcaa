-- Nexmark q11: user sessions: bids per bidder session of bids less than 10 s apart.
-- Flink's form; DataFusion has no session windows, so the tests compare it emitted
-- on window close with the same query kept up to date.
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end
