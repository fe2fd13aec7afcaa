-- Nexmark q13: bounded side input join: bids joined with a static table (temporal join).
-- The side input is made by side_input.sql.
SELECT B.auction, B.bidder, B.price, B.date_time, S.value
FROM bid B
JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() S
ON mod(B.auction, 10000) = S.key
