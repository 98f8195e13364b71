-- Seed 003, BigQuery side: the table to export and its four rows.
CREATE OR REPLACE TABLE abc.export_demo_table
(
  sale_id       INT64,
  product_name  STRING,
  quantity      INT64,
  unit_price    NUMERIC,
  sale_date     DATE,
  updated_at    TIMESTAMP
);

INSERT INTO abc.export_demo_table
  (sale_id, product_name, quantity, unit_price, sale_date, updated_at)
VALUES
  (1, 'Notebook', 2, 500.00, DATE '2026-07-20', TIMESTAMP '2026-07-20 01:00:00+00'),
  (2, 'Pen', 10, 120.00, DATE '2026-07-20', TIMESTAMP '2026-07-20 02:00:00+00'),
  (3, 'File', 5, 300.00, DATE '2026-07-21', TIMESTAMP '2026-07-21 01:00:00+00'),
  (4, 'Desk', 1, 25000.00, DATE '2026-07-21', TIMESTAMP '2026-07-21 02:00:00+00');
