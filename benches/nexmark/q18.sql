-- Nexmark q18: each bidder's last bid on each auction (dedup, top-1).
-- Ties on date_time broken by price and extra.
SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction
    ORDER BY date_time DESC, price DESC, extra) AS rank_number
  FROM bid)
WHERE rank_number <= 1
