-- Nexmark q0: pass-through: every bid.
SELECT auction, bidder, price, date_time
FROM bid
