-- Nexmark q7: highest bid in each tumbling window (window aggregate joined back to the bids).
SELECT B.auction, B.price, B.bidder, B.date_time
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS date_time
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
  GROUP BY window_end) B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
