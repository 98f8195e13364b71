-- The changelog transform's output: one row per active id.
CREATE TABLE demo.current (
  id     BIGINT NOT NULL,
  status STRING,
  ts     TIMESTAMP,
  amount DECIMAL(10, 2),
  PRIMARY KEY (id)
);
