-- Nexmark q2: selection: bids on five auctions.
SELECT auction, price
FROM bid
WHERE auction = 1007 OR auction = 1020 OR auction = 2001 OR auction = 2019 OR auction = 2087
