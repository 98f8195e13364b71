-- Seed 004's input: an append-only table of records with a status.
CREATE TABLE foundry.input (
  id     BIGINT,
  status STRING,
  ts     TIMESTAMP,
  amount DECIMAL(10, 2)
);

INSERT INTO foundry.input (id, status, ts, amount) VALUES
  (1, 'active',   '2026-07-01 09:00:00+00', 10.00),
  (2, 'inactive', '2026-07-01 09:05:00+00', 20.00),
  (3, 'active',   '2026-07-01 09:10:00+00', 30.00);
