-- Nexmark q22: bids with the first three directories of their URL (split_part).
SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3
FROM bid
