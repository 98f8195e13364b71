-- The next build's new rows: appended to the input, never rewritten.
INSERT INTO foundry.input (id, status, ts, amount) VALUES
  (4, 'active',   '2026-07-02 09:00:00+00', 40.00),
  (5, 'inactive', '2026-07-02 09:05:00+00', 50.00);
