-- Nexmark q6: average closing price per seller over their last ten auctions (over window).
-- q6: the average closing price over each seller's last ten auctions (a window
-- function with a ROWS frame over an updating aggregate); ties on the time broken by
-- the auction's id, and the time taken as the auction's last bid.
SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller
  ORDER BY Q.date_time, Q.id ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
FROM (
  SELECT MAX(B.price) AS final, A.seller, A.id, MAX(B.date_time) AS date_time
  FROM auction AS A, bid AS B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.seller) AS Q
