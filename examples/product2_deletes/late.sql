-- Late arrivals: changes made before step 2 (older SystemModstamp) that reach bronze now,
-- and one new product.
INSERT INTO `medallion_demo.product2__bronze`
  (`Id`, `Name`, `IsActive`, `IsDeleted`, `IsArchived`, `CreatedDate`, `SystemModstamp`)
VALUES
  ('01t000000000002AAA', 'ノートパソコン Premium (late edit)', 'true', 'false', 'false',
   '2026-07-02T09:00:00.000+0000', '2026-07-31T12:00:00.000+0000'),
  ('01t000000000003AAA', 'クラウドサービス Basic (late edit)', 'false', 'false', 'true',
   '2026-07-03T09:00:00.000+0000', '2026-07-30T12:00:00.000+0000'),
  ('01t000000000005AAA', 'キーボード', 'true', 'false', 'false',
   '2026-08-02T09:00:00.000+0000', '2026-08-02T09:00:00.000+0000');
