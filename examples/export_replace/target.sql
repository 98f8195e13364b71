-- Seed 003, Databricks side: the target table and its initial rows.
CREATE OR REPLACE TABLE demo.sales
(
  sale_id       BIGINT,
  product_name  STRING,
  quantity      BIGINT,
  unit_price    DECIMAL(18, 2),
  sale_date     DATE,
  updated_at    TIMESTAMP_NTZ,
  export_timestamp TIMESTAMP_NTZ
);

INSERT INTO demo.sales
  (sale_id, product_name, quantity, unit_price, sale_date, updated_at, export_timestamp)
VALUES
  (1, 'Notebook', 2, CAST(500.00 AS DECIMAL(18, 2)), '2026-07-20', '2026-07-20 01:00:00', '2026-07-21 01:00:00'),
  (2, 'Pen', 10, CAST(120.00 AS DECIMAL(18, 2)), '2026-07-20', '2026-07-20 02:00:00', '2026-07-21 01:00:00'),
  (3, 'File', 1, CAST(300.00 AS DECIMAL(18, 2)), '2026-07-21', '2026-07-21 01:00:00', '2026-07-21 01:00:00');
