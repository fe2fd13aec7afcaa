-- Nexmark q1: currency conversion: prices in euros.
SELECT auction, bidder, 0.908 * price AS price, date_time
FROM bid
