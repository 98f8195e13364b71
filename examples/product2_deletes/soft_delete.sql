-- Salesforce marks ...002 deleted and renames ...003 (both newer than step 1).
INSERT INTO `medallion_demo.product2__bronze`
  (`Id`, `Name`, `IsActive`, `IsDeleted`, `IsArchived`, `CreatedDate`, `SystemModstamp`)
VALUES
  ('01t000000000002AAA', 'ノートパソコン Premium', 'true', 'true', 'false',
   '2026-07-02T09:00:00.000+0000', '2026-08-01T00:00:00.000+0000'),
  ('01t000000000003AAA', 'クラウドサービス Basic v2', 'false', 'false', 'true',
   '2026-07-03T09:00:00.000+0000', '2026-08-01T00:00:00.000+0000');
