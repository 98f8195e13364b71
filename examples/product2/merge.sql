-- From seed 000 (BigQuery CHANGES + MERGE), unmodified: the seed's own incremental load,
-- for comparing with the apply flow (`smelt sql -f merge.sql`).
DECLARE end_ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP();
DECLARE start_ts TIMESTAMP DEFAULT TIMESTAMP_SUB(end_ts, INTERVAL 7 DAY);
MERGE `medallion_demo.product2__silver` AS slv
USING (
WITH brz_changes AS (
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
start_ts,
TIMESTAMP_ADD(start_ts, INTERVAL 1 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 1 DAY),
TIMESTAMP_ADD(start_ts, INTERVAL 2 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 2 DAY),
TIMESTAMP_ADD(start_ts, INTERVAL 3 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 3 DAY),
TIMESTAMP_ADD(start_ts, INTERVAL 4 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 4 DAY),
TIMESTAMP_ADD(start_ts, INTERVAL 5 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 5 DAY),
TIMESTAMP_ADD(start_ts, INTERVAL 6 DAY)
)
UNION ALL
SELECT *
FROM CHANGES(
TABLE `medallion_demo.product2__bronze`,
TIMESTAMP_ADD(start_ts, INTERVAL 6 DAY),
end_ts
)
),
slv_records AS (
SELECT
Id,
MAX(`_CHANGE_TIMESTAMP`) AS max_ingest_timestamp
FROM brz_changes
GROUP BY
id
)
SELECT
brz.`Id`,
brz.`Name`,
brz.`ProductCode`,
brz.`Description`,
SAFE_CAST(brz.`IsActive` AS BOOL) AS `IsActive`,
SAFE_CAST(brz.`CreatedDate` AS TIMESTAMP) AS `CreatedDate`,
brz.`CreatedById`,
SAFE_CAST(brz.`LastModifiedDate` AS TIMESTAMP) AS `LastModifiedDate`,
brz.`LastModifiedById`,
SAFE_CAST(brz.`SystemModstamp` AS TIMESTAMP) AS `SystemModstamp`,
brz.`Family`,
brz.`ExternalDataSourceId`,
brz.`ExternalId`,
brz.`DisplayUrl`,
brz.`QuantityUnitOfMeasure`,
SAFE_CAST(brz.`IsDeleted` AS BOOL) AS `IsDeleted`,
SAFE_CAST(brz.`IsArchived` AS BOOL) AS `IsArchived`,
SAFE_CAST(brz.`LastViewedDate` AS TIMESTAMP) AS `LastViewedDate`,
SAFE_CAST(brz.`LastReferencedDate` AS TIMESTAMP) AS `LastReferencedDate`,
brz.`StockKeepingUnit`,
brz.`_CHANGE_TIMESTAMP` AS `_ingest_timestamp`,
FROM brz_changes AS brz
INNER JOIN slv_records AS slvr
ON brz.id = slvr.id
AND brz.`_CHANGE_TIMESTAMP` = slvr.max_ingest_timestamp
WHERE brz.`_CHANGE_TYPE` IN ('INSERT', 'UPDATE')
QUALIFY ROW_NUMBER() OVER (
PARTITION BY brz.`Id`
ORDER BY
brz.`_CHANGE_TIMESTAMP` DESC
) = 1
) AS brz
ON slv.`Id` = brz.`Id`
WHEN MATCHED AND slv.`_ingest_timestamp` < brz.`_ingest_timestamp` THEN
UPDATE SET
slv.`Name` = brz.`Name`,
slv.`ProductCode` = brz.`ProductCode`,
slv.`Description` = brz.`Description`,
slv.`IsActive` = brz.`IsActive`,
slv.`CreatedDate` = brz.`CreatedDate`,
slv.`CreatedById` = brz.`CreatedById`,
slv.`LastModifiedDate` = brz.`LastModifiedDate`,
slv.`LastModifiedById` = brz.`LastModifiedById`,
slv.`SystemModstamp` = brz.`SystemModstamp`,
slv.`Family` = brz.`Family`,
slv.`ExternalDataSourceId` = brz.`ExternalDataSourceId`,
slv.`ExternalId` = brz.`ExternalId`,
slv.`DisplayUrl` = brz.`DisplayUrl`,
slv.`QuantityUnitOfMeasure` = brz.`QuantityUnitOfMeasure`,
slv.`IsDeleted` = brz.`IsDeleted`,
slv.`IsArchived` = brz.`IsArchived`,
slv.`LastViewedDate` = brz.`LastViewedDate`,
slv.`LastReferencedDate` = brz.`LastReferencedDate`,
slv.`StockKeepingUnit` = brz.`StockKeepingUnit`,
slv.`_ingest_timestamp` = brz.`_ingest_timestamp`,
slv.`_update_timestamp` = current_timestamp()
WHEN NOT MATCHED THEN
INSERT (`Id`, `Name`, `ProductCode`, `Description`, `IsActive`, `CreatedDate`, `CreatedById`, `LastModifiedDate`, `LastModifiedById`, `SystemModstamp`, `Family`, `ExternalDataSourceId`, `ExternalId`, `DisplayUrl`, `QuantityUnitOfMeasure`, `IsDeleted`, `IsArchived`, `LastViewedDate`, `LastReferencedDate`, `StockKeepingUnit`, `_ingest_timestamp`, `_update_timestamp`)
VALUES (brz.`Id`, brz.`Name`, brz.`ProductCode`, brz.`Description`, brz.`IsActive`, brz.`CreatedDate`, brz.`CreatedById`, brz.`LastModifiedDate`, brz.`LastModifiedById`, brz.`SystemModstamp`, brz.`Family`, brz.`ExternalDataSourceId`, brz.`ExternalId`, brz.`DisplayUrl`, brz.`QuantityUnitOfMeasure`, brz.`IsDeleted`, brz.`IsArchived`, brz.`LastViewedDate`, brz.`LastReferencedDate`, brz.`StockKeepingUnit`, brz.`_ingest_timestamp`, current_timestamp())
;
