#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (corpus/<target>/seed-*) from the project's
examples, the seeds' statements and the Delta fixtures under testdata/ (Apache 2.0, from
delta-rs; see testdata/delta/README.md). Inputs found by fuzzing sit beside them, named by
libFuzzer; this script never removes those."""
import glob, hashlib, os, re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def put(target, data: bytes):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# pipeline: every example's pipeline file, with the schema file it points to after a NUL.
for yaml in sorted(glob.glob(os.path.join(ROOT, "examples/*/smelt.yaml"))):
    text = read(yaml)
    m = re.search(rb"schema:\s*(\S+)", text)
    ddl = read(os.path.join(os.path.dirname(yaml), m.group(1).decode())) if m else b""
    put("pipeline", text + b"\0" + ddl)
put("pipeline", b"lake: ./lake\nflows:\n  t:\n    apply:\n      from: b.t\n      into: s.t\n      schema: s.sql\n      keys: [id]\n      sequence_by: [v]\n")

# sql: the examples' SQL scripts (the seeds' statements) and the statements smelt refuses.
for script in sorted(glob.glob(os.path.join(ROOT, "examples/**/*.sql"), recursive=True)):
    put("sql", read(script))
for stmt in [
    b"SELECT * FROM table_changes('raw.t', 0)",
    b"SELECT * FROM ice.raw.orders.snapshots",
    b"INSERT INTO raw.s REPLACE WHERE d >= DATE '2026-07-21' SELECT DATE '2026-07-21', 9",
    b"MERGE INTO s.t AS t USING b.t AS b ON t.id = b.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    b"DECLARE x INT64 DEFAULT 1; SET x = x + 1; SELECT x",
    b"CREATE TABLE raw.p (x BIGINT) PARTITIONED BY (x)",
    b"SELECT * FROM raw.t VERSION AS OF 7; SELECT * FROM raw.t TIMESTAMP AS OF '2026-01-01'",
    b"ALTER TABLE raw.t SET TBLPROPERTIES ('delta.appendOnly' = 'true')",
]:
    put("sql", stmt)

# cast: <dialect byte><type byte><text>: typical and edge values of every type.
values = [b"1", b"-0", b" 42 ", b"1.5", b"1e3", b"NaN", b"inf", b"-Infinity", b"12345678.905",
          b"true", b"FALSE", b"yes", b"0", b"2026-07-20", b"2026-07-20 10:00:00",
          b"2026-07-20T10:00:00.123456Z", b"2026-07-20 10:00:00+09:00",
          b"2026-07-20 10:00:00 Asia/Tokyo", b"9999-12-31", b"0001-01-01", b"", b"x"]
for d in range(3):
    for t in range(11):
        for v in values:
            put("cast", bytes([d, t]) + v)

# delta_log: <0><a commit JSON> and <1><a _last_checkpoint> of the fixtures.
for commit in sorted(glob.glob(os.path.join(ROOT, "testdata/delta/*/_delta_log/*.json"))):
    data = read(commit)
    if len(data) < 20000:
        put("delta_log", b"\0" + data)
for last in sorted(glob.glob(os.path.join(ROOT, "testdata/delta/*/_delta_log/_last_checkpoint"))):
    put("delta_log", b"\1" + read(last))

# csv: <layout byte><file>.
for options, text in [
    (0, b"id,v\n1,a\n2,\"b,c\"\n3,\"multi\nline\"\n"),
    (1, b"1,2\n3,4\n"),
    (2, b"id;v\n1;x\n2;y;extra\n3\n"),
    (6, b"a|b|\n1|2|\n"),
    (8, b"id,v\n1,\"a\\\"b\"\n"),
    (16, "id,名前\n1,テスト\n".encode("shift_jis")),
    (32, b"id,v\n1,NULL\n2,\n"),
]:
    put("csv", bytes([options]) + text)

# json_lines.
for text in [
    b'{"id": 1, "v": "a"}\n{"id": 2, "v": null}\n\n{"id": 3, "nested": {"x": [1, 2]}}\n',
    b'{"id": 1}\nnot json\n{"id": 2, "id": 3}\n',
    b'[1, 2]\n"text"\n{"a": 1e400}\n',
]:
    put("json_lines", text)
