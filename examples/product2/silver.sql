-- From seed 000 (BigQuery CHANGES + MERGE), unmodified.
CREATE OR REPLACE TABLE `medallion_demo.product2__silver` (
`Id` STRING NOT NULL,
`Name` STRING,
`ProductCode` STRING,
`Description` STRING,
`IsActive` BOOL,
`CreatedDate` TIMESTAMP,
`CreatedById` STRING,
`LastModifiedDate` TIMESTAMP,
`LastModifiedById` STRING,
`SystemModstamp` TIMESTAMP,
`Family` STRING,
`ExternalDataSourceId` STRING,
`ExternalId` STRING,
`DisplayUrl` STRING,
`QuantityUnitOfMeasure` STRING,
`IsDeleted` BOOL,
`IsArchived` BOOL,
`LastViewedDate` TIMESTAMP,
`LastReferencedDate` TIMESTAMP,
`StockKeepingUnit` STRING,
`_ingest_timestamp` TIMESTAMP,
`_update_timestamp` TIMESTAMP,
PRIMARY KEY (`Id`) NOT ENFORCED
)
;
ALTER TABLE `medallion_demo.product2__silver`
SET OPTIONS (
enable_change_history = TRUE
);
