-- Nexmark q19: each auction's ten highest bids (top-N).
SELECT *
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction
    ORDER BY price DESC, date_time, bidder, extra) AS rank_number
  FROM bid)
WHERE rank_number <= 10
