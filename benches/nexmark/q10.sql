-- Nexmark q10: log to file system: every bid with its date and time as text (a sink).
SELECT auction, bidder, price, date_time, TO_CHAR(date_time, 'YYYY-MM-DD') AS date, TO_CHAR(date_time, 'HH:MI') AS time
FROM bid
