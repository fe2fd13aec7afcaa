-- The static table Nexmark q13 joins the bids with (RisingWave's side input).
CREATE TABLE side_input (key BIGINT PRIMARY KEY, value VARCHAR);
INSERT INTO side_input SELECT v, v::varchar FROM generate_series(0, 9999) AS v;
