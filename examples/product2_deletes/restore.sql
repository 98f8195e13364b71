-- ...002 is restored from the recycle bin: a newer change brings it back.
INSERT INTO `medallion_demo.product2__bronze`
  (`Id`, `Name`, `IsActive`, `IsDeleted`, `IsArchived`, `CreatedDate`, `SystemModstamp`)
VALUES
  ('01t000000000002AAA', 'ノートパソコン Premium', 'true', 'false', 'false',
   '2026-07-02T09:00:00.000+0000', '2026-08-05T00:00:00.000+0000');
