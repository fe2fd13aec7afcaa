-- Nexmark q12: bids per bidder in tumbling windows of processing time.
-- The bid source declares p_time TIMESTAMPTZ AS PROCTIME(); tests fix the server's clock.
SELECT bidder, count(*) AS bid_count, window_start, window_end
FROM TUMBLE(bid, p_time, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end
