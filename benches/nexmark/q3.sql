-- Nexmark q3: local item suggestion: sellers in three states with auctions in category 10 (join).
SELECT P.name, P.city, P.state, A.id
FROM auction AS A
INNER
JOIN person AS P
ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')
