-- Seed 002's silver `part`: the SELECT's casts as column types.
CREATE TABLE tpch.part (
  p_partkey         BIGINT,
  p_name            STRING,
  p_mfgr            STRING,
  p_brand           STRING,
  p_type            STRING,
  p_size            INT,
  p_container       STRING,
  p_retailprice     DECIMAL(12, 2),
  p_comment         STRING,
  _datasource       STRING,
  _ingest_timestamp TIMESTAMP,
  PRIMARY KEY (p_partkey) NOT ENFORCED
);
