-- From seed 000 (BigQuery CHANGES + MERGE), unmodified.
CREATE OR REPLACE TABLE `medallion_demo.product2__bronze` (
`Id` STRING,
`Name` STRING,
`ProductCode` STRING,
`Description` STRING,
`IsActive` STRING,
`CreatedDate` STRING,
`CreatedById` STRING,
`LastModifiedDate` STRING,
`LastModifiedById` STRING,
`SystemModstamp` STRING,
`Family` STRING,
`ExternalDataSourceId` STRING,
`ExternalId` STRING,
`DisplayUrl` STRING,
`QuantityUnitOfMeasure` STRING,
`IsDeleted` STRING,
`IsArchived` STRING,
`LastViewedDate` STRING,
`LastReferencedDate` STRING,
`StockKeepingUnit` STRING
);
ALTER TABLE `medallion_demo.product2__bronze`
SET OPTIONS (
enable_change_history = TRUE
);
