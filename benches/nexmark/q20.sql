-- Nexmark q20: bids on auctions in category 10, with the auction (join).
SELECT auction, bidder, price, channel, url, B.date_time AS date_timeB, item_name, description, initial_bid, reserve, A.date_time AS date_timeA, expires, seller, category
FROM bid B
INNER
JOIN auction A
ON B.auction = A.id
WHERE A.category = 10
