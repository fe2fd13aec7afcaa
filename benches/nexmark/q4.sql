-- Nexmark q4: average closing price per category (interval join, two aggregates).
SELECT Q.category, AVG(Q.final) AS avg
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.category) Q
GROUP BY Q.category
